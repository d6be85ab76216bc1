"""Figures for the book's residual-connections chapter. Each helper returns a Figure."""

from __future__ import annotations

import numpy as np

from ._figure import new_figure

__all__ = [
    "plot_depth_sweep",
    "plot_gradient_norm_per_layer",
    "plot_loss_curves",
    "plot_variance_by_depth",
]


def plot_variance_by_depth(results: dict[str, dict]):
    """Left: measured ``v_l`` (lines) and predicted values (markers) against depth, log y.
    Right: correlation of ``x_l`` with the input ``x_0`` against depth.

    ``results`` maps a label to the dict of
    :func:`layernorm_tutorial.transformer.residual_variance_by_depth`.
    """
    fig, (ax_var, ax_corr) = new_figure(1, 2, height=3.5)
    for label, r in results.items():
        depth = np.arange(len(r["variance"]))
        (line,) = ax_var.plot(depth, r["variance"], label=f"{label}: measured")
        ax_var.plot(depth[1:], r["predicted"], "o", markersize=3, color=line.get_color(),
                    fillstyle="none", label=f"{label}: predicted")
        ax_corr.plot(depth, r["input_correlation"], color=line.get_color(), label=label)
    ax_var.set_yscale("log")
    ax_var.set_xlabel("layer l")
    ax_var.set_ylabel(r"activation variance $v_l$")
    ax_var.legend(fontsize=7)
    ax_corr.set_xlabel("layer l")
    ax_corr.set_ylabel(r"correlation of $x_l$ with $x_0$")
    ax_corr.axhline(0.0, color="black", linewidth=0.6)
    ax_corr.legend(fontsize=7)
    return fig


def plot_gradient_norm_per_layer(norms: dict[str, np.ndarray]):
    """Gradient norm of each block's FFN output weight against the layer index (1 = input)."""
    fig, ax = new_figure(1, 1, height=3.2)
    for label, values in norms.items():
        values = np.asarray(values, dtype=float)
        ax.plot(np.arange(1, len(values) + 1), values, "o-", markersize=3, label=label)
    ax.set_xlabel("layer index (1 = nearest the input)")
    ax.set_ylabel(r"$\|\partial L/\partial W_2\|$ at initialization")
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return fig


def plot_loss_curves(curves: dict[str, list[float]], chance: float | None = None):
    """Training loss per step for several runs; optional dashed line at the chance loss."""
    fig, ax = new_figure(1, 1, height=3.2)
    for label, losses in curves.items():
        ax.plot(np.arange(1, len(losses) + 1), losses, label=label)
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle="--", linewidth=0.8, label="chance level")
    ax.set_xlabel("training step")
    ax.set_ylabel("training cross-entropy (nats)")
    ax.legend(fontsize=8)
    return fig


def plot_depth_sweep(curves: dict[tuple[str, int], list[float]], chance: float | None = None):
    """One panel per arrangement (e.g. "post-LN", "pre-LN"), one loss curve per depth.

    ``curves`` maps ``(arrangement, num_layers)`` to the per-step training losses.
    """
    arrangements = list(dict.fromkeys(a for a, _ in curves))
    fig, axes = new_figure(1, len(arrangements), height=3.3)
    axes = list(np.atleast_1d(axes))
    for ax, arrangement in zip(axes, arrangements, strict=True):
        for (a, layers), losses in curves.items():
            if a == arrangement:
                ax.plot(np.arange(1, len(losses) + 1), losses, label=f"{layers} layers")
        if chance is not None:
            ax.axhline(chance, color="gray", linestyle="--", linewidth=0.8, label="chance")
        ax.set_title(arrangement)
        ax.set_xlabel("training step")
        ax.set_ylabel("training cross-entropy (nats)")
        ax.legend(fontsize=8)
    top = max(max(v) for v in curves.values())
    bottom = min(min(v) for v in curves.values())
    for ax in axes:
        ax.set_ylim(bottom - 0.05, top + 0.05)
    return fig
