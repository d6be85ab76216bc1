"""Decide, before Triton is imported, whether kernels run on a GPU or in Triton's interpreter.

Triton's interpreter (``TRITON_INTERPRET=1``) executes each program of a kernel launch in
Python with NumPy, on CPU tensors. It is slow but exact enough to test a kernel's logic on a
machine without a GPU. Triton consults the flag whenever a function is decorated with
``@triton.jit``, and it decorates its own library functions (those behind ``tl.sum``, for
example) when ``triton`` is imported: so the flag must be on before ``triton`` is first
imported in the process.
"""

from __future__ import annotations

import os
import sys

import torch

_FLAG = "TRITON_INTERPRET"
_TRUE = {"1", "true", "on", "yes"}
# Set to 1 by ``aot.compile_in_subprocess``: define the kernels for Triton's compiler (so that
# ``triton.compile`` can build PTX and cubins for a GPU target) even without a GPU. Kernels
# defined this way can be compiled ahead of time but not launched on this machine.
COMPILE_ONLY_FLAG = "LAYERNORM_TRITON_COMPILE_ONLY"

_HOW_TO_FIX = (
    "Set the environment variable TRITON_INTERPRET=1 before anything imports triton "
    "(for example `TRITON_INTERPRET=1 python ...`, or `os.environ['TRITON_INTERPRET'] = '1'` "
    "as the first line of a notebook), or import layernorm_tutorial.triton_kernels first."
)


def _flag_is_on() -> bool:
    return os.environ.get(_FLAG, "").strip().lower() in _TRUE


def _triton_was_imported_interpreted() -> bool:
    """Whether the already imported Triton defined its own library in interpreter mode.

    Triton decorates its standard-library helpers (for example the combine function behind
    ``tl.sum``) when ``triton`` is imported; kernels defined later cannot run in the
    interpreter if those helpers were compiled-mode functions. We look at one of them and
    fall back to the environment flag if Triton's layout is unfamiliar.
    """
    standard = sys.modules.get("triton.language.standard")
    helper = getattr(standard, "_sum_combine", None)
    if helper is None:
        return _flag_is_on()
    return type(helper).__name__ == "InterpretedFunction"


def _triton_was_imported_interpreted_if_imported() -> bool:
    return "triton" in sys.modules and _triton_was_imported_interpreted()


def arrange_backend() -> bool:
    """Make Triton usable in this process; return True when kernels will be interpreted.

    - CUDA available: nothing to do, kernels compile for the GPU (returns False, unless the
      user asked for the interpreter by setting ``TRITON_INTERPRET=1`` themselves).
    - No GPU, ``TRITON_INTERPRET`` explicitly set to something false: RuntimeError, because
      without a GPU only the interpreter can run a kernel.
    - No GPU, Triton not imported yet: set ``TRITON_INTERPRET=1`` and return True.
    - No GPU, Triton already imported in interpreter mode: keep the flag on, return True.
    - No GPU, Triton already imported without the interpreter: RuntimeError. (Setting the
      flag now would not help: Triton's own library functions were already defined for
      compilation, and the interpreter refuses to call them.)
    - ``LAYERNORM_TRITON_COMPILE_ONLY=1`` (no GPU needed): kernels are defined for the
      compiler, for ahead-of-time compilation only (returns False); RuntimeError if the
      interpreter is switched on as well, since the two exclude each other.
    """
    if os.environ.get(COMPILE_ONLY_FLAG, "") == "1":
        if _flag_is_on() or _triton_was_imported_interpreted_if_imported():
            raise RuntimeError(
                f"{COMPILE_ONLY_FLAG}=1 asks for kernels defined for Triton's compiler, but "
                f"{_FLAG} (Triton's CPU interpreter) is on: unset {_FLAG} in that process."
            )
        return False
    if torch.cuda.is_available():
        return _flag_is_on()
    explicit = os.environ.get(_FLAG)
    if explicit is not None and not _flag_is_on():
        raise RuntimeError(
            f"No CUDA GPU is available and {_FLAG}={explicit!r} disables Triton's CPU "
            f"interpreter, so the Triton kernels cannot run. {_HOW_TO_FIX}"
        )
    if "triton" in sys.modules and not _triton_was_imported_interpreted():
        raise RuntimeError(
            "triton was imported before layernorm_tutorial.triton_kernels without its CPU "
            f"interpreter, and there is no CUDA GPU, so the kernels cannot run. {_HOW_TO_FIX}"
        )
    os.environ[_FLAG] = "1"
    return True
