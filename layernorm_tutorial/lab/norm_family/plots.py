"""Figures for the chapters on the normalization family and on LN versus BN."""

from __future__ import annotations

import numpy as np
from matplotlib.patches import Rectangle

from layernorm_tutorial import axes as family_axes
from layernorm_tutorial.lab.common.figure import new_figure

HIGHLIGHT = "#1f77b4"
OTHER = "#d9d9d9"


def _cube_colors(index: np.ndarray, chosen: int) -> np.ndarray:
    colors = np.empty(index.shape + (4,))
    colors[...] = (0.85, 0.85, 0.85, 0.25)
    colors[index == chosen] = (0.12, 0.47, 0.71, 0.95)
    return colors


def family_cubes(layout: str = "NCHW", shape=None, num_groups: int = 2):
    """One 3-D panel per family member: the elements that share one mean/variance, in blue.

    Drawn from :func:`layernorm_tutorial.axes.statistic_index`, so the picture is what the
    package computes. ``"NCHW"``: axes N, C and H*W (height and width flattened into one axis,
    as in the Group Norm paper's figure), default shape (4, 6, 2, 2). ``"BTC"``: axes B, T,
    C, default shape (4, 5, 6). The highlighted set is the one containing element 0.
    The five panels sit on two rows (three, then two and the legend) so that each is about
    1.6 inches wide at the book's text width (twice a row of five).
    """
    if shape is None:
        shape = (4, 6, 2, 2) if layout == "NCHW" else (4, 5, 6)
    names = family_axes.FAMILY
    ncols = 3
    nrows = -(-len(names) // ncols)
    fig, grid = new_figure(nrows, ncols, height=2.6 * nrows, projection="3d")
    grid = list(np.ravel(grid))
    for ax in grid[len(names):]:
        ax.remove()
    for ax, name in zip(grid, names, strict=False):
        groups = num_groups if name == "group" else None
        index = family_axes.statistic_index(name, shape, layout, num_groups=groups)
        if layout == "NCHW":
            index = index.reshape(shape[0], shape[1], shape[2] * shape[3])
            labels = ("N (samples)", "C (channels)", "H·W (pixels)")
        else:
            labels = {"B": "B (sequences)", "T": "T (tokens)", "C": "C (channels)"}
            labels = tuple(labels.get(a, a) for a in family_axes.LAYOUTS[layout])
        filled = np.ones(index.shape, dtype=bool)
        ax.voxels(filled, facecolors=_cube_colors(index, 0), edgecolor=(0.3, 0.3, 0.3, 0.5),
                  linewidth=0.4)
        title = family_axes.DISPLAY_NAMES[name]
        if name == "group":
            title += f" (G={num_groups})"
        ax.set_title(title, fontsize=11)
        ax.set_xlabel(labels[0], labelpad=-10, fontsize=9)
        ax.set_ylabel(labels[1], labelpad=-10, fontsize=9)
        ax.set_zlabel(labels[2], labelpad=-10, fontsize=9)
        ax.set_xticks([])
        ax.set_yticks([])
        ax.set_zticks([])
        ax.set_box_aspect(index.shape, zoom=0.9)
        ax.view_init(elev=22, azim=-58)
    from matplotlib.patches import Patch

    fig.legend(handles=[Patch(facecolor=(0.12, 0.47, 0.71, 0.95),
                              label="one set: shares a mean\nand a variance"),
                        Patch(facecolor=(0.85, 0.85, 0.85, 0.6), edgecolor=(0.3, 0.3, 0.3),
                              label="other sets, normalized\nseparately")],
               loc="center", bbox_to_anchor=(0.83, 0.27), fontsize=10, frameon=False)
    return fig


def samples_by_features(x):
    """Two heat maps of the same (samples x features) matrix with its statistics.

    Left, batch norm: one mean per *column* (feature), written under the matrix. Right, layer
    norm: one mean per *row* (sample), written beside it. ``x`` is a 2-D array or tensor.
    """
    x = np.asarray(x.detach() if hasattr(x, "detach") else x, dtype=float)
    if x.ndim != 2:
        raise ValueError(f"x must be 2-D (samples, features), got shape {x.shape}")
    m, n = x.shape
    fig, (left, right) = new_figure(1, 2, height=3.2)
    limit = float(np.abs(x).max())
    for ax, title in ((left, "Batch norm: statistics per column"),
                      (right, "Layer norm: statistics per row")):
        image = ax.imshow(x, cmap="coolwarm", vmin=-limit, vmax=limit, aspect="equal")
        ax.set_xticks(range(n), [f"f{j + 1}" for j in range(n)], fontsize=7)
        ax.set_yticks(range(m), [f"s{i + 1}" for i in range(m)], fontsize=7)
        ax.set_xlabel("feature")
        ax.set_ylabel("sample")
        ax.set_title(title, fontsize=9)
    for j, mu in enumerate(x.mean(axis=0)):
        left.add_patch(Rectangle((j - 0.45, -0.45), 0.9, m - 0.1, fill=False,
                                 edgecolor="black", linewidth=0.8))
        left.text(j, m - 0.1, f"{mu:.1f}", ha="center", va="top", fontsize=7)
    for i, mu in enumerate(x.mean(axis=1)):
        right.add_patch(Rectangle((-0.45, i - 0.45), n - 0.1, 0.9, fill=False,
                                  edgecolor="black", linewidth=0.8))
        right.text(n - 0.3, i, f"{mu:.1f}", ha="left", va="center", fontsize=7)
    left.set_xlim(-0.6, n - 0.4)
    left.set_ylim(m + 0.6, -0.6)
    right.set_xlim(-0.6, n + 0.8)
    fig.colorbar(image, ax=[left, right], shrink=0.7, label="activation value")
    return fig


def batch_noise(batch_sizes, curves: dict, reference_scale: float | None = None):
    """Log-log plot of measured spreads against batch size, one line per entry of ``curves``.

    ``curves`` maps a label to the standard deviations measured at ``batch_sizes``. With
    ``reference_scale`` a dashed ``reference_scale / sqrt(B)`` line is added.
    """
    batch_sizes = np.asarray(batch_sizes, dtype=float)
    fig, ax = new_figure(1, 1, height=3.4)
    for (label, values), marker in zip(curves.items(), "osd^v", strict=False):
        ax.plot(batch_sizes, np.asarray(values, dtype=float), marker=marker, label=label)
    if reference_scale is not None:
        ax.plot(batch_sizes, reference_scale / np.sqrt(batch_sizes), "k--", linewidth=1,
                label=r"$\propto 1/\sqrt{B}$")
    ax.set_xscale("log", base=2)
    ax.set_yscale("log")
    ax.set_xlabel("batch size B (samples per batch)")
    ax.set_ylabel("standard deviation over batches")
    ax.grid(True, which="both", alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def running_statistics(steps, traces: dict, target: float, batch_values=None):
    """Running-mean estimates against training steps, one line per momentum setting.

    ``traces`` maps a label to the running mean after each step; ``target`` is the value the
    estimates should approach (dotted line); ``batch_values`` (optional) are the per-batch
    means, drawn as grey dots.
    """
    fig, ax = new_figure(1, 1, height=3.4)
    steps = np.asarray(steps)
    if batch_values is not None:
        ax.plot(steps, np.asarray(batch_values, dtype=float), ".", color="0.6",
                label="batch mean")
    for label, values in traces.items():
        ax.plot(steps, np.asarray(values, dtype=float), label=label)
    ax.axhline(target, color="k", linestyle=":", linewidth=1, label="value at evaluation")
    ax.set_xlabel("training step")
    ax.set_ylabel("running mean of one channel")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def padding_effect(pad_counts, changes: dict):
    """Largest change of the real tokens' outputs against the number of padded positions.

    ``changes`` maps a label (e.g. "BatchNorm1d", "LayerNorm") to the maximum absolute change
    measured at each entry of ``pad_counts``.
    """
    fig, ax = new_figure(1, 1, height=3.2)
    for (label, values), marker in zip(changes.items(), "os^", strict=False):
        ax.plot(pad_counts, np.asarray(values, dtype=float), marker=marker, label=label)
    ax.set_xlabel("padding positions added per sequence")
    ax.set_ylabel("max |change| of real tokens' outputs")
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def style_removal(content, styled, outputs: dict, *, image: int = 0, channel: int = 0):
    """One feature map before and after normalization, for an image and its restyled copy.

    ``content`` and ``styled`` are ``(N, C, H, W)`` arrays or tensors; ``outputs`` maps a
    member's name to the pair ``(normalized content, normalized styled)`` of the same shape.
    Top row: ``content[image, channel]`` and its normalized versions; bottom row: the same for
    ``styled``. Each column shares one colour scale, so a column whose two panels look the same
    is a normalization that removed the style.
    """
    def as_array(t):
        t = t.detach().cpu().numpy() if hasattr(t, "detach") else np.asarray(t)
        if t.ndim != 4:
            raise ValueError(f"expected (N, C, H, W) arrays, got shape {t.shape}")
        return t[image, channel]

    columns = [("input", as_array(content), as_array(styled))]
    columns += [(name, as_array(a), as_array(b)) for name, (a, b) in outputs.items()]
    fig, panels = new_figure(2, len(columns), height=3.0)
    for col, (title, top, bottom) in enumerate(columns):
        low = min(top.min(), bottom.min())
        high = max(top.max(), bottom.max())
        for row, values in enumerate((top, bottom)):
            ax = panels[row, col]
            image_artist = ax.imshow(values, cmap="gray", vmin=low, vmax=high)
            ax.set_xticks([])
            ax.set_yticks([])
            if row == 0:
                ax.set_title(title, fontsize=9)
        fig.colorbar(image_artist, ax=panels[:, col], shrink=0.8,
                     label="value" if col == 0 else None)
    panels[0, 0].set_ylabel("content\n(position h)")
    panels[1, 0].set_ylabel("restyled\n(position h)")
    for ax in panels[1]:
        ax.set_xlabel("position w")
    return fig
