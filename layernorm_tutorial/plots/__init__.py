"""Figure helpers for the book. Every helper returns a ``matplotlib.figure.Figure``.

Figures are created with ``matplotlib.figure.Figure`` (not ``pyplot``), so the library never
touches global plotting state and a notebook displays a figure exactly once: when a cell
returns it. Chapter-specific helpers live in one module per chapter.
"""

from ._figure import new_figure

__all__ = ["new_figure"]
