"""A single place that decides how the book's figures look."""

from __future__ import annotations

from matplotlib.figure import Figure

BOOK_WIDTH_INCHES = 7.0


def new_figure(nrows: int = 1, ncols: int = 1, *, width: float = BOOK_WIDTH_INCHES,
               height: float = 3.6, **subplot_kw):
    """Return ``(fig, axes)`` sized for the book's text column.

    ``axes`` is a single Axes when ``nrows == ncols == 1``, otherwise an array of Axes, as in
    ``pyplot.subplots``. The figure uses constrained layout so labels are never clipped.
    """
    fig = Figure(figsize=(width, height), layout="constrained", dpi=100)
    axes = fig.subplots(nrows, ncols, squeeze=True, subplot_kw=subplot_kw or None)
    return fig, axes
