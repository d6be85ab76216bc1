"""Figures of the large-models chapter, drawn from the stored results (plain dicts).

Every function returns a matplotlib ``Figure`` with labelled axes and units; the notebook
displays it. Inputs are the sections of
:func:`~layernorm_tutorial.lab.large_models.results.load_results`.
"""

from __future__ import annotations

import math

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure

__all__ = ["qk_curves", "qk_lr_sweep", "deepnorm_curves", "per_token_scatter",
           "norm_comparison", "gamma_decay", "norm_timing", "depth_growth"]

_ARM_LABEL = {"none": "no QK-norm", "rmsnorm": "QK-norm (RMSNorm)",
              "softcap": "soft-capping (50/30)", "zloss": "z-loss (1e-4)",
              "qkclip": "QK-Clip (tau 100)"}
_COLORS = {"none": "tab:red", "rmsnorm": "tab:blue", "softcap": "tab:orange",
           "zloss": "tab:purple", "qkclip": "tab:green"}


def qk_curves(qk: dict, lr: float, arms=("none", "rmsnorm")):
    """Max attention logit (log scale) and training loss against step at one learning rate,
    one thin line per seed and arm."""
    fig, (ax_logit, ax_loss) = new_figure(1, 2, height=3.2)
    for arm in arms:
        by_lr = qk["runs"][arm]
        for i, run in enumerate(by_lr[str(lr)]):
            steps = np.arange(1, len(run["loss"]) + 1)
            label = _ARM_LABEL[arm] if i == 0 else None
            ax_logit.plot(steps, run["max_logit"], color=_COLORS[arm], lw=0.8, alpha=0.8,
                          label=label)
            ax_loss.plot(steps, run["loss"], color=_COLORS[arm], lw=0.8, alpha=0.8, label=label)
    ax_logit.set_yscale("log")
    ax_logit.set_xlabel("training step")
    ax_logit.set_ylabel("max |attention logit| (log scale)")
    ax_loss.axhline(math.log(16), color="gray", ls="--", lw=0.8, label="chance, ln 16")
    ax_loss.set_xlabel("training step")
    ax_loss.set_ylabel("training loss (nats per token)")
    ax_logit.set_title(f"learning rate {lr:g}", fontsize=10)
    ax_loss.legend(fontsize=8)
    return fig


def _capped(loss: float, cap: float) -> float:
    """``min(loss, cap)``, with a non-finite loss (a diverged run) counted as ``cap``."""
    return min(loss, cap) if math.isfinite(loss) else cap


def qk_lr_sweep(qk: dict, arms=("none", "rmsnorm"), cap: float = 10.0):
    """Final training loss of every run against the peak learning rate (log scale).

    A run that ends above ``cap`` nats, or not finite, is drawn at ``cap`` (its dot and
    its share of the mean line), and the y axis stops just above ``cap``, so the losses
    below chance stay readable next to runs that blew up to tens of nats.
    """
    fig, ax = new_figure(height=3.2)
    for k, arm in enumerate(arms):
        by_lr = qk["runs"][arm]
        lrs = sorted(by_lr, key=float)
        for lr in lrs:
            finals = [_capped(r["final_loss"], cap) for r in by_lr[lr]]
            jitter = 1 + 0.04 * (k - (len(arms) - 1) / 2)
            ax.scatter([float(lr) * jitter] * len(finals), finals, s=14, color=_COLORS[arm],
                       label=_ARM_LABEL[arm] if lr == lrs[0] else None,
                       clip_on=False)  # a loss of 0 shows as a whole dot on the axis
        means = [np.mean([_capped(r["final_loss"], cap) for r in by_lr[lr]]) for lr in lrs]
        ax.plot([float(lr) for lr in lrs], means, color=_COLORS[arm], lw=1)
    ax.axhline(math.log(16), color="gray", ls="--", lw=0.8, label="chance, ln 16")
    ax.set_xscale("log")
    ax.set_ylim(0, 1.05 * cap)
    ax.set_xlabel("peak learning rate (AdamW, log scale)")
    ax.set_ylabel(f"final training loss (nats per token, capped at {cap:g})")
    ax.legend(fontsize=8)
    return fig


def deepnorm_curves(deep: dict):
    """Training loss against step for the four arms (mean over seeds, seeds thin)."""
    fig, ax = new_figure(height=3.2)
    colors = ["tab:red", "tab:orange", "tab:blue", "tab:green"]
    for color, (arm, runs) in zip(colors, deep["runs"].items(), strict=False):
        for run in runs:
            ax.plot(np.arange(1, len(run["loss"]) + 1), run["loss"], color=color, lw=0.5,
                    alpha=0.4)
        mean = np.mean([r["loss"] for r in runs], axis=0)
        ax.plot(np.arange(1, len(mean) + 1), mean, color=color, lw=1.8, label=arm)
    ax.axhline(math.log(8), color="gray", ls="--", lw=0.8, label="chance, ln 8")
    ax.set_xlabel("training step")
    ax.set_ylabel("training loss (nats per token)")
    ax.set_title(f"{deep['settings']['num_layers']} post-LN blocks, Adam, "
                 f"lr {deep['settings']['lr']:g}", fontsize=10)
    ax.legend(fontsize=8)
    return fig


def per_token_scatter(maps: list, names: list):
    """LayerNorm input against its normalized output for the named norms, with the best
    ``a tanh(b x) + c`` fit."""
    chosen = [m for m in maps if m["name"] in names]
    fig, axes = new_figure(1, len(chosen), height=3.0)
    axes = np.atleast_1d(axes)
    for ax, m in zip(axes, chosen, strict=True):
        ax.scatter(m["x"], m["y"], s=2, alpha=0.35, color="tab:blue")
        grid = np.linspace(min(m["x"]), max(m["x"]), 200)
        ax.plot(grid, m["a"] * np.tanh(m["b"] * grid) + m["c"], color="tab:red", lw=1,
                label=f"tanh fit, $R^2$ {m['r2_tanh']:.3f}")
        ax.set_title(f"{m['name']} (linear $R^2$ {m['r2_linear']:.3f})", fontsize=9)
        ax.set_xlabel("LN input $x$ (unitless)")
        ax.legend(fontsize=7, loc="lower right")
    axes[0].set_ylabel(r"LN output $\hat x$ (before $\gamma, \beta$)")
    return fig


def norm_comparison(main: dict, alpha: dict):
    """Held-out accuracy per reported seed: the three norms (left) and DyT's initial alpha
    (right); lines join the runs of one seed."""
    fig, (ax1, ax2) = new_figure(1, 2, height=3.2)
    for ax, data, labels in ((ax1, main["accuracy"], list(main["accuracy"])),
                             (ax2, alpha["accuracy"], [f"α₀ = {a}" for a in alpha["accuracy"]])):
        values = np.array([data[k] for k in data]) * 100      # (arms, seeds)
        for s in range(values.shape[1]):
            ax.plot(range(len(values)), values[:, s], color="gray", lw=0.6, marker="o", ms=3)
        ax.plot(range(len(values)), values.mean(1), color="black", lw=0, marker="_", ms=20)
        ax.set_xticks(range(len(values)), labels)
        ax.set_ylabel("held-out token accuracy (%)")
        ax.set_xlim(-0.5, len(values) - 0.5)
    ax1.set_xlabel("norm in every block and before the head")
    ax2.set_xlabel("DyT's initial alpha")
    return fig


def gamma_decay(decay: dict):
    """Mean LayerNorm gain against step, with and without decay on it, and the decay-only
    curve ``(1 - lr wd)^t``."""
    fig, ax = new_figure(height=3.0)
    for (arm, run), color in zip(decay["runs"].items(), ("tab:red", "tab:blue"), strict=True):
        ax.plot(np.arange(1, len(run["mean_gamma"]) + 1), run["mean_gamma"], color=color,
                label=arm)
    ax.plot(np.arange(1, len(decay["decay_only"]) + 1), decay["decay_only"], color="gray",
            ls="--", label=r"decay alone, $(1 - \eta\lambda)^t$")
    ax.set_xlabel("training step")
    ax.set_ylabel(r"mean LayerNorm gain $\gamma$")
    ax.legend(fontsize=8)
    return fig


def norm_timing(timing: dict):
    """Median forward+backward time per call of each norm (milliseconds)."""
    fig, ax = new_figure(height=3.0)
    names = list(timing["seconds"])
    medians = [1e3 * float(np.median(timing["seconds"][n])) for n in names]
    ax.barh(range(len(names)), medians, color=["tab:gray" if n.startswith("torch") else
                                               "tab:blue" for n in names])
    ax.set_yticks(range(len(names)), names)
    ax.invert_yaxis()
    rows, features = timing["shape"]
    ax.set_xlabel(f"forward + backward time per call (ms), ({rows}, {features}) fp32, 1 thread")
    return fig


def depth_growth(curves: list):
    """Left: the residual stream's standard deviation after each block; right: how much
    each block moves the stream (``||branch|| / ||x||``), one line per placement
    (:func:`~layernorm_tutorial.lab.large_models.frontier.depth_growth`)."""
    fig, (ax_std, ax_rel) = new_figure(1, 2, height=3.2)
    for c in curves:
        blocks = np.arange(1, len(c["std"]) + 1)
        ax_std.plot(blocks, c["std"], label=c["variant"])
        ax_rel.plot(blocks, c["relative_update"], label=c["variant"])
    ax_std.set_xlabel("block")
    ax_std.set_ylabel("std of the residual stream (unitless)")
    ax_rel.set_xlabel("block")
    ax_rel.set_ylabel("||branch output|| / ||stream|| (ratio)")
    ax_rel.set_yscale("log")
    ax_std.legend(fontsize=8)
    return fig
