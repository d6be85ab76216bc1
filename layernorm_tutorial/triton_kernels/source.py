"""Show parts of a kernel's source next to the math (the book prints them)."""

from __future__ import annotations

import inspect
import textwrap


def excerpt(fn, start: str, stop: str | None = None) -> str:
    """Lines of ``fn``'s source from the first line containing ``start`` up to, but not
    including, the next line containing ``stop`` (to the end when ``stop`` is None),
    dedented. ``fn`` may be a ``@triton.jit`` kernel (its Python function is used)."""
    fn = getattr(fn, "fn", fn)
    lines = inspect.getsource(fn).splitlines()
    try:
        first = next(i for i, line in enumerate(lines) if start in line)
    except StopIteration:
        raise ValueError(f"start: {start!r} does not occur in {fn.__name__}") from None
    last = len(lines)
    if stop is not None:
        try:
            last = next(i for i in range(first + 1, len(lines)) if stop in lines[i])
        except StopIteration:
            raise ValueError(f"stop: {stop!r} does not occur after {start!r}") from None
    return textwrap.dedent("\n".join(lines[first:last]))
