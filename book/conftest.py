"""nbval on the chapters: cells that need what a platform may lack are skipped, not failed.

Triton has wheels for Linux x86-64 and aarch64 only, and torch.compile needs a C++ compiler
on the CPU. A code cell tagged ``triton`` (the GPU kernel chapter's interpreter cells, Liger,
torch.compile on Triton; ``requires-triton`` is accepted too) or ``requires-compiler``
(torch.compile on the CPU) is skipped, with one reason, where that
is missing; everywhere else it runs and its stored output is compared as usual. The HTML book
shows the stored outputs either way. CI runs the whole ``pytest`` once with Triton blocked
(``tests/no_triton``) to prove that the rest of the book runs on such a machine.
"""

from __future__ import annotations

import importlib.util
import os
import shutil

import pytest

TRITON_TAGS = ("triton", "requires-triton")
COMPILER_TAGS = ("requires-compiler",)


def _triton_missing() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError:
        return ("needs Triton (wheels for Linux x86-64/aarch64 only), which is not "
                "installed here")
    try:
        liger = importlib.util.find_spec("liger_kernel")
    except ImportError:
        liger = None
    if liger is None:
        return "needs Liger-Kernel (Linux only, with Triton), which is not installed here"
    return None


def _compiler_missing() -> str | None:
    compilers = [os.environ.get("CXX"), "g++", "clang++", "c++", "cl"]
    if any(c and shutil.which(c) for c in compilers):
        return None
    return "needs a C++ compiler for torch.compile, none found on PATH"


def pytest_collection_modifyitems(config, items):
    reasons = {}
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        for kind, names, check in (("triton", TRITON_TAGS, _triton_missing),
                                   ("compiler", COMPILER_TAGS, _compiler_missing)):
            if any(name in tags for name in names):
                if kind not in reasons:
                    reasons[kind] = check()
                if reasons[kind]:
                    item.add_marker(pytest.mark.skip(reason=reasons[kind]))
