"""Where the chapter's Triton cells can run, and how they step aside where they cannot.

Triton (and Liger Kernel, built on it) ships wheels for Linux x86-64 and aarch64 only. On a
Mac or on Windows the chapter's cells that launch Triton kernels, compile them ahead of
time or print their source cannot run; every other cell can. Such a cell starts with the
line ``# needs triton``. :func:`skip_cells_without_triton`, called once in the first cell,
registers an IPython input transformer that, where Triton cannot be imported, replaces such
a cell by one printed line saying why it was skipped; where Triton is importable it does
nothing. (The test suite skips the same cells by their ``triton`` tag.)
"""

from __future__ import annotations

MARKER = "# needs triton"


def triton_status() -> str | None:
    """None when the package's Triton kernels import; otherwise the reason, one line.

    Importing ``layernorm_tutorial.triton_kernels`` first also switches Triton to its CPU
    interpreter on a machine without a GPU, before anything else (``torch.compile``) imports
    triton."""
    try:
        import layernorm_tutorial.triton_kernels  # noqa: F401
    except ImportError as err:
        return str(err).splitlines()[0] if str(err) else type(err).__name__
    return None


def skip_message(reason: str) -> str:
    """The line a skipped cell prints."""
    return (f"skipped: this cell needs Triton (Linux x86-64/aarch64), "
            f"not importable here ({reason})")


def transform(lines: list[str], reason: str | None) -> list[str]:
    """An IPython cleanup transformer: a cell whose first line starts with ``MARKER``
    becomes ``print(<skip message>)`` when ``reason`` is not None; other cells, and every
    cell when ``reason`` is None, are returned unchanged."""
    if reason is None or not lines or not lines[0].lstrip().startswith(MARKER):
        return lines
    return [f"print({skip_message(reason)!r})\n"]


def skip_cells_without_triton(ipython=None) -> str | None:
    """Register :func:`transform` with the running IPython (once); return the reason
    Triton is unavailable, or None. Outside IPython it only returns the reason."""
    reason = triton_status()
    if ipython is None:
        try:
            from IPython import get_ipython
        except ImportError:
            return reason
        ipython = get_ipython()
    if ipython is None:
        return reason
    hooks = ipython.input_transformers_cleanup
    hooks[:] = [h for h in hooks if getattr(h, "_gpu_kernel_guard", False) is False]

    def guard(lines: list[str]) -> list[str]:
        return transform(lines, reason)
    guard._gpu_kernel_guard = True
    hooks.append(guard)
    return reason
