"""Make ``triton`` and ``liger_kernel`` unimportable: the test run of a machine without them.

Triton ships wheels for Linux x86-64 and aarch64 only, and Liger-Kernel needs Triton, so on
macOS and Windows neither is installed. CI proves that the README's two commands work there
without such a machine: it runs ``pytest`` once more with this folder first on
``PYTHONPATH`` (see ``.ci/run``). Python imports ``sitecustomize`` at start-up in every
process, the notebooks' kernels included, and the finder below answers any import of the
blocked packages with the ``ModuleNotFoundError`` that a machine without them raises.
"""

import sys
from importlib.abc import MetaPathFinder

BLOCKED = ("triton", "liger_kernel")


class _Blocked(MetaPathFinder):
    def find_spec(self, fullname, path=None, target=None):
        if fullname.split(".")[0] in BLOCKED:
            raise ModuleNotFoundError(f"No module named {fullname!r} (blocked by "
                                      "tests/no_triton: a machine without Triton)",
                                      name=fullname)
        return None


sys.meta_path.insert(0, _Blocked())
