"""Figures for the book's residual-connections chapter. Each helper returns a Figure."""

from __future__ import annotations

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure

__all__ = [
    "plot_depth_sweep",
    "plot_gradient_heatmaps",
    "plot_gradient_norm_per_layer",
    "plot_loss_curves",
    "plot_loss_panels",
    "plot_variance_by_depth",
]


def _mean_and_band(ax, x, values, label, **style):
    """Plot one run (1-D ``values``) as a line, or several runs (2-D, one row per seed) as
    their mean with the min-max band shaded. Returns the line."""
    values = np.asarray(values, dtype=float)
    if values.ndim == 1:
        (line,) = ax.plot(x, values, label=label, **style)
        return line
    if values.ndim != 2:
        raise ValueError(f"values must be 1-D (one run) or 2-D (seeds, points), got shape "
                         f"{values.shape}")
    (line,) = ax.plot(x, values.mean(axis=0), label=f"{label} (mean of {len(values)})", **style)
    ax.fill_between(x, values.min(axis=0), values.max(axis=0), color=line.get_color(),
                    alpha=0.2, linewidth=0)
    return line


def plot_variance_by_depth(results: dict[str, dict], probes: dict[str, dict] | None = None):
    """Left: measured ``v_l`` (lines) and predicted values (markers) against depth, log y.
    Right: what is left of the input ``x_0`` at layer ``l``: the correlation of ``x_l`` with
    ``x_0`` (dotted when ``probes`` are given, solid otherwise) and, if ``probes`` are given,
    the held-out R^2 of a linear probe reading ``x_0`` from ``x_l`` (solid).

    ``results`` maps a label to the dict of
    :func:`layernorm_tutorial.lab.residual.experiments.residual_variance_by_depth`;
    ``probes`` maps some of the same labels to that of
    :func:`~layernorm_tutorial.lab.residual.experiments.input_probe_by_depth`.
    """
    fig, (ax_var, ax_corr) = new_figure(1, 2, height=3.5)
    for label, r in results.items():
        depth = np.arange(len(r["variance"]))
        (line,) = ax_var.plot(depth, r["variance"], label=f"{label}: measured")
        ax_var.plot(depth[1:], r["predicted"], "o", markersize=3, color=line.get_color(),
                    fillstyle="none", label=f"{label}: predicted")
        if probes is None:
            ax_corr.plot(depth, r["input_correlation"], color=line.get_color(), label=label)
            continue
        if label in probes:
            r2 = probes[label]["probe_r2"]
            ax_corr.plot(np.arange(len(r2)), r2, color=line.get_color(),
                         label=f"{label}: probe $R^2$")
        ax_corr.plot(depth, r["input_correlation"], color=line.get_color(), linestyle=":",
                     label=f"{label}: correlation")
    ax_var.set_yscale("log")
    ax_var.set_xlabel("layer l")
    ax_var.set_ylabel(r"activation variance $v_l$")
    ax_var.legend(fontsize=7)
    ax_corr.set_xlabel("layer l")
    ax_corr.set_ylabel(r"linear-probe $R^2$ of $x_0$ from $x_l$; correlation" if probes
                       else r"correlation of $x_l$ with $x_0$")
    ax_corr.axhline(0.0, color="black", linewidth=0.6)
    ax_corr.legend(fontsize=6)
    return fig


def plot_gradient_norm_per_layer(norms: dict[str, np.ndarray],
                                 ylabel: str = r"$\|\partial L/\partial W_2\|$ at initialization"):
    """Gradient norm of each block's FFN output weight against the layer index (1 = input).

    ``norms`` maps a label to one run's norms ``(layers,)`` or several seeds' ``(seeds,
    layers)``; several seeds are drawn as their mean with the min-max band shaded.
    """
    fig, ax = new_figure(1, 1, height=3.2)
    for label, values in norms.items():
        values = np.asarray(values, dtype=float)
        _mean_and_band(ax, np.arange(1, values.shape[-1] + 1), values, label, marker="o",
                       markersize=3)
    ax.set_xlabel("layer index (1 = nearest the input)")
    ax.set_ylabel(ylabel)
    ax.set_ylim(bottom=0)
    ax.legend(fontsize=8)
    return fig


def plot_gradient_heatmaps(panels: dict[str, np.ndarray]):
    """One panel per run setting: gradient norm per layer (y) and training step (x).

    ``panels`` maps a title to an array ``(steps, layers)`` (for example the mean over seeds
    of ``warmup.traces_over_seeds(...)["grad_norm"]``). All panels share one logarithmic
    colour scale, so equal colours are equal norms.
    """
    from matplotlib.colors import LogNorm

    arrays = {title: np.asarray(a, dtype=float) for title, a in panels.items()}
    if any(a.ndim != 2 for a in arrays.values()):
        raise ValueError("every panel must be a 2-D array (steps, layers)")
    low = min(a[a > 0].min() for a in arrays.values())
    high = max(a.max() for a in arrays.values())
    fig, axes = new_figure(1, len(arrays), height=3.0)
    axes = list(np.atleast_1d(axes))
    for ax, (title, a) in zip(axes, arrays.items(), strict=True):
        steps, layers = a.shape
        image = ax.imshow(a.T, origin="lower", aspect="auto", norm=LogNorm(low, high),
                          extent=(-0.5, steps - 0.5, 0.5, layers + 0.5), cmap="viridis")
        ax.set_title(title, fontsize=9)
        ax.set_xlabel("training step")
    axes[0].set_ylabel("layer (1 = nearest the input)")
    fig.colorbar(image, ax=axes, label=r"$\|\partial L/\partial W_2\|$")
    return fig


def plot_loss_curves(curves: dict[str, list[float] | np.ndarray], chance: float | None = None):
    """Training loss per step for several settings; optional dashed line at the chance loss.

    Each value is one run's losses ``(steps,)`` or several seeds' ``(seeds, steps)``, drawn as
    their mean with the min-max band shaded.
    """
    fig, ax = new_figure(1, 1, height=3.2)
    for label, losses in curves.items():
        losses = np.asarray(losses, dtype=float)
        _mean_and_band(ax, np.arange(1, losses.shape[-1] + 1), losses, label)
    if chance is not None:
        ax.axhline(chance, color="gray", linestyle="--", linewidth=0.8, label="chance level")
    ax.set_xlabel("training step")
    ax.set_ylabel("training cross-entropy (nats)")
    ax.legend(fontsize=8)
    return fig


def plot_loss_panels(panels: dict[str, dict[str, np.ndarray]], chance: float | None = None):
    """One panel per title (e.g. an arrangement), several loss curves per panel.

    ``panels`` maps a title to ``{label: losses}``, each ``(steps,)`` for one run or
    ``(seeds, steps)`` for several (mean line, min-max band). The panels share the y axis.
    """
    fig, axes = new_figure(1, len(panels), height=3.4)
    axes = list(np.atleast_1d(axes))
    for ax in axes[1:]:
        ax.sharey(axes[0])
    for ax, (title, curves) in zip(axes, panels.items(), strict=True):
        for label, losses in curves.items():
            losses = np.asarray(losses, dtype=float)
            _mean_and_band(ax, np.arange(1, losses.shape[-1] + 1), losses, label)
        if chance is not None:
            ax.axhline(chance, color="gray", linestyle="--", linewidth=0.8, label="chance level")
        ax.set_title(title)
        ax.set_xlabel("training step")
        ax.legend(fontsize=7)
    axes[0].set_ylabel("training cross-entropy (nats)")
    return fig


def plot_depth_sweep(curves: dict[tuple[str, int], np.ndarray], chance: float | None = None):
    """One panel per arrangement (e.g. "post-LN", "pre-LN"), one loss curve per depth.

    ``curves`` maps ``(arrangement, num_layers)`` to the per-step training losses of one run
    ``(steps,)`` or of several seeds ``(seeds, steps)`` (mean line, min-max band).
    """
    arrangements = list(dict.fromkeys(a for a, _ in curves))
    fig, axes = new_figure(1, len(arrangements), height=3.3)
    axes = list(np.atleast_1d(axes))
    for ax, arrangement in zip(axes, arrangements, strict=True):
        for (a, layers), losses in curves.items():
            if a == arrangement:
                losses = np.asarray(losses, dtype=float)
                _mean_and_band(ax, np.arange(1, losses.shape[-1] + 1), losses,
                               f"{layers} layers")
        if chance is not None:
            ax.axhline(chance, color="gray", linestyle="--", linewidth=0.8, label="chance")
        ax.set_title(arrangement)
        ax.set_xlabel("training step")
        ax.set_ylabel("training cross-entropy (nats)")
        ax.legend(fontsize=8)
    top = max(float(np.max(v)) for v in curves.values())
    bottom = min(float(np.min(v)) for v in curves.values())
    for ax in axes:
        ax.set_ylim(bottom - 0.05, top + 0.05)
    return fig
