"""Figures for the evidence chapter's side experiments: BatchNorm and the initialization
scale (:mod:`layernorm_tutorial.lab.evidence.bn_init`), and LN/BN combinations
(:mod:`layernorm_tutorial.lab.evidence.combinations`). Each helper returns a Figure."""

from __future__ import annotations

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure
from layernorm_tutorial.lab.evidence.plots import NORM_STYLE

__all__ = ["plot_gradients_at_init", "plot_init_scale_accuracy", "plot_combinations"]

_SCALE_COLORS = ("#1b9e77", "#000000", "#d95f02", "#7570b3", "#e7298a")


def plot_gradients_at_init(grads: np.ndarray, norms, scales):
    """Gradient norm ``|dL/dW_l|`` per hidden layer at initialization, one panel per norm.

    ``grads``: shape ``(len(norms), len(scales), seeds, depth)`` (from
    ``bn_init.gradient_norm_table``). One line per initialization scale: the geometric mean
    over seeds, with a band from the smallest to the largest seed.
    """
    grads = np.asarray(grads, dtype=float)
    if grads.ndim != 4 or grads.shape[:2] != (len(norms), len(scales)):
        raise ValueError("grads must have shape (len(norms), len(scales), seeds, depth), "
                         f"got {grads.shape}")
    fig, axes = new_figure(1, len(norms), height=3.3)
    axes = np.atleast_1d(axes)
    layers = np.arange(1, grads.shape[-1] + 1)
    for ax, norm, per_norm in zip(axes, norms, grads, strict=True):
        for color, scale, g in zip(_SCALE_COLORS, scales, per_norm, strict=False):
            ax.plot(layers, np.exp(np.log(g).mean(axis=0)), color=color, marker="o", ms=3,
                    label=f"init scale {scale:g}")
            ax.fill_between(layers, g.min(axis=0), g.max(axis=0), color=color, alpha=0.2)
        ax.set_yscale("log")
        ax.set_xlabel("hidden layer (1 = input side)")
        ax.set_title(NORM_STYLE[norm][1].split("\n")[0])
    low, high = grads.min() / 1.5, grads.max() * 1.5        # one y range: panels comparable
    for ax in axes:
        ax.set_ylim(low, high)
    axes[0].set_ylabel("|dL/dW| at initialization (log scale)")
    axes[-1].legend(fontsize=7)
    return fig


def plot_init_scale_accuracy(result):
    """Test accuracy after a fixed SGD budget vs the initialization scale, one line per norm
    (mean ± sd over seeds, dots for the seeds); ``result`` is a ``bn_init.InitScaleResult``."""
    fig, ax = new_figure(1, 1, height=3.3, width=5.2)
    scales = np.array(result.scales)
    for i, norm in enumerate(result.norms):
        color, label = NORM_STYLE[norm]
        acc = 100 * result.accuracy[i]
        ax.errorbar(scales, acc.mean(axis=-1), yerr=acc.std(axis=-1, ddof=1), color=color,
                    marker="o", ms=4, capsize=3, label=label.split("\n")[0])
        for j, s in enumerate(scales):
            ax.plot(np.full(acc.shape[-1], s), acc[j], ".", color=color, ms=3, alpha=0.6)
    ax.axhline(10, color="0.6", ls=":", lw=1, label="chance (10 %)")
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(scales), [f"{s:g}" for s in scales])
    ax.set_xlabel("initialization scale (× He's standard deviation, log scale)")
    ax.set_ylabel("test accuracy (%)")
    ax.set_ylim(0, 100)
    ax.legend(fontsize=8, loc="lower center")
    return fig


def plot_combinations(result):
    """Test accuracy per variant of the trunk/head network (bar: mean over seeds, error bar:
    sd, dots: seeds); ``result`` is a ``combinations.CombinationResult``."""
    fig, ax = new_figure(1, 1, height=3.3, width=5.2)
    colors = ("#8c564b", NORM_STYLE["bn"][0], NORM_STYLE["ln"][0], NORM_STYLE["none"][0])
    for i, (_variant, acc) in enumerate(zip(result.variants, 100 * result.test_acc,
                                           strict=True)):
        ax.bar(i, acc.mean(), yerr=acc.std(ddof=1), color=colors[i % len(colors)], alpha=0.75,
               capsize=4)
        ax.plot(np.full(acc.size, i) + np.linspace(-0.15, 0.15, acc.size), acc, "k.", ms=4)
    ax.set_xticks(range(len(result.variants)), [v.replace(" + ", " +\n")
                                                for v in result.variants], fontsize=8)
    low = 100 * float(np.min(result.test_acc))
    ax.set_ylim(max(0.0, low - 5), 100)
    ax.set_ylabel("test accuracy (%)")
    ax.set_title("conv trunk + attention head, batch 32")
    return fig
