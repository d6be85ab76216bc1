"""Figures for the evidence chapter ("Do the rules of thumb hold?").

Every helper takes the results document (``layernorm_tutorial.lab.evidence.load_results()``) and
returns a ``matplotlib.figure.Figure``. Error bars are one standard deviation over the
reported seeds; the dots are the individual seeds. (The figures describe; the verdicts come
from :mod:`.analysis`.)
"""

from __future__ import annotations

import numpy as np
from matplotlib.ticker import FuncFormatter, NullFormatter

from layernorm_tutorial.lab.common.figure import new_figure
from layernorm_tutorial.lab.evidence.analysis import (
    batch_size_curves,
    rate_range,
    summarize,
    values,
)
from layernorm_tutorial.lab.evidence.results import find_runs

__all__ = ["NORM_STYLE", "plot_batch_size", "plot_cnn_rnn", "plot_generalization_gap",
           "plot_learning_curves", "plot_rate_ranges"]

# one colour and label per normalization, the same in every figure of the chapter
NORM_STYLE = {
    "none": ("#7f7f7f", "no norm"),
    "bn": ("#d62728", "BatchNorm"),
    "ln": ("#1f77b4", "LayerNorm"),
    "gn": ("#2ca02c", "GroupNorm (4 groups)"),
    "ln_c": ("#9467bd", "LN over channels\n(ConvNeXt style)"),
}


def _epochs(doc: dict, experiment: str) -> int:
    return next(e["epochs"] for e in doc["config"]["experiments"] if e["name"] == experiment)


def _batch_axis(ax, sizes) -> None:
    ax.set_xscale("log", base=2)
    ax.set_xticks(list(sizes), [str(int(b)) for b in sizes])
    ax.xaxis.set_minor_formatter(NullFormatter())
    ax.set_xlabel("mini-batch size (log scale)")


def _log_y(ax) -> None:
    """Log y axis with plain-number labels (0.01, 0.1, 1); minor ticks are labelled too when
    the axis spans less than about one decade, so a short axis is never left unlabelled."""
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FuncFormatter(lambda v, _: f"{v:g}"))

    def minor(v, _):
        low, high = ax.get_ylim()
        return f"{v:.3g}" if high / low < 12 else ""

    ax.yaxis.set_minor_formatter(FuncFormatter(minor))


def _norms(doc: dict, experiment: str) -> list[str]:
    present = {r["spec"]["norm"] for r in find_runs(doc, experiment)}
    return [n for n in NORM_STYLE if n in present]


def plot_batch_size(doc: dict):
    """Claim 1. Left: MLP test accuracy vs batch size per norm (mean ± sd over seeds).
    Right: BN's loss on the training set measured two ways, in training mode (mini-batch
    statistics, mean over the last epoch) and in evaluation mode (running statistics)."""
    fig, (left, right) = new_figure(1, 2, height=3.4)
    for norm, (sizes, mean, sd) in batch_size_curves(doc, "test_acc").items():
        color, label = NORM_STYLE[norm]
        left.errorbar(sizes, 100 * mean, yerr=100 * sd, color=color, label=label, marker="o",
                      ms=4, capsize=3)
    _batch_axis(left, sizes)
    left.set_ylabel("test accuracy (%)")
    left.set_title(f"MLP on digits, {_epochs(doc, 'mlp_batch_size')} epochs")
    left.legend(loc="lower right", fontsize=8)
    for norm in ("bn", "ln"):
        color, label = NORM_STYLE[norm]
        sizes, mb, _ = batch_size_curves(doc, "minibatch_loss_last_epoch")[norm]
        _, ev, _ = batch_size_curves(doc, "train_loss")[norm]
        right.plot(sizes, mb, color=color, ls="--", marker="s", ms=3,
                   label=f"{label}, training mode")
        right.plot(sizes, ev, color=color, ls="-", marker="o", ms=3,
                   label=f"{label}, evaluation mode")
    _batch_axis(right, sizes)
    _log_y(right)
    right.set_ylabel("training-set cross-entropy (log scale)")
    right.set_title("same weights, two modes")
    right.legend(fontsize=7)
    return fig


def _bars(ax, doc: dict, experiment: str, metric: str = "test_acc", scale: float = 100.0):
    norms = _norms(doc, experiment)
    for i, norm in enumerate(norms):
        x = values(find_runs(doc, experiment, norm), metric) * scale
        s = summarize(x)
        color, _ = NORM_STYLE[norm]
        ax.bar(i, s.mean, yerr=s.sd, color=color, alpha=0.75, capsize=4)
        ax.plot(np.full(x.size, i) + np.linspace(-0.15, 0.15, x.size), x, "k.", ms=4)
    ax.set_xticks(range(len(norms)), [NORM_STYLE[n][1] for n in norms], fontsize=8)
    return norms


def plot_cnn_rnn(doc: dict):
    """Claims 2 and 3: test accuracy per norm for the CNN (left) and the RNN (right)."""
    fig, (cnn, rnn) = new_figure(1, 2, height=3.6)
    for ax, exp, title in ((cnn, "cnn", "CNN"), (rnn, "rnn", "row-by-row RNN")):
        _bars(ax, doc, exp)
        lo = min(values(find_runs(doc, exp), "test_acc")) * 100
        ax.set_ylim(max(0.0, lo - 5), 100)
        ax.set_ylabel("test accuracy (%)")
        ax.set_title(f"{title}, batch 32, {_epochs(doc, exp)} epochs")
        ax.tick_params(axis="x", labelrotation=30)
    return fig


def plot_generalization_gap(doc: dict):
    """Claim 4: training accuracy minus test accuracy per norm (MLP and CNN, batch 32)."""
    fig, axes = new_figure(1, 2, height=3.4)
    for ax, exp, title in zip(axes, ("mlp_batch_size", "cnn"), ("MLP", "CNN"), strict=True):
        runs = {n: find_runs(doc, exp, n, 32) for n in _norms(doc, exp)}
        for i, (norm, rs) in enumerate(runs.items()):
            x = values(rs, "gap") * 100
            s = summarize(x)
            ax.bar(i, s.mean, yerr=s.sd, color=NORM_STYLE[norm][0], alpha=0.75, capsize=4)
            ax.plot(np.full(x.size, i) + np.linspace(-0.15, 0.15, x.size), x, "k.", ms=4)
        ax.set_xticks(range(len(runs)), [NORM_STYLE[n][1] for n in runs], fontsize=8)
        ax.tick_params(axis="x", labelrotation=30)
        ax.set_ylabel("train acc. − test acc. (pp)")
        ax.set_title(f"{title}, batch 32")
    return fig


def plot_learning_curves(doc: dict):
    """Claim 5: training loss (evaluation mode, log scale) vs optimizer step, mean over seeds,
    for the MLP, CNN and RNN at batch 32, each norm at its chosen learning rate."""
    fig, axes = new_figure(1, 3, height=3.4)
    for ax, exp, title in zip(axes, ("mlp_batch_size", "cnn", "rnn"), ("MLP", "CNN", "RNN"),
                              strict=True):
        for norm in _norms(doc, exp):
            runs = find_runs(doc, exp, norm, 32)
            steps = np.array(runs[0]["curve"]["step"])
            loss = np.array([[np.nan if v is None else v for v in r["curve"]["train_loss"]]
                             for r in runs], dtype=float)
            color, label = NORM_STYLE[norm]
            ax.plot(steps, np.nanmean(loss, axis=0), color=color, label=label.split("\n")[0])
        _log_y(ax)
        ax.set_xlabel("optimizer step")
        ax.set_title(f"{title}, batch 32")
    axes[0].set_ylabel("training cross-entropy (log scale)")
    handles, labels = axes[1].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    return fig


def plot_rate_ranges(doc: dict):
    """Claim 5, "allows larger learning rates": final validation accuracy against the Adam
    learning rate for every norm of the MLP (left) and the RNN (right) at batch 32; lines are
    the mean over the reported seeds, bands their range, the dotted line chance (10 %)."""
    experiments = sorted({r["experiment"] for r in doc["range_runs"]})
    fig, axes = new_figure(1, len(experiments), height=3.3)
    axes = np.atleast_1d(axes)
    for ax, exp in zip(axes, experiments, strict=True):
        for norm in [n for n in NORM_STYLE if find_runs(doc, exp, n)]:
            rr = rate_range(doc, exp, norm)
            acc = 100 * rr.val_acc
            color, label = NORM_STYLE[norm]
            ax.plot(rr.rates, acc.mean(axis=0), color=color, marker="o", ms=4,
                    label=label.split("\n")[0])
            ax.fill_between(rr.rates, acc.min(axis=0), acc.max(axis=0), color=color, alpha=0.15)
        ax.axhline(10, color="k", ls=":", lw=1)
        ax.set_xscale("log")
        ax.set_xlabel("Adam learning rate (log scale)")
        batch = find_runs(doc, exp)[0]["spec"]["batch_size"]
        ax.set_title(f"{exp.removeprefix('lr_range_').upper()}, batch {batch}")
    axes[0].set_ylabel("validation accuracy (%)")
    handles, labels = axes[0].get_legend_handles_labels()
    fig.legend(handles, labels, loc="outside lower center", ncol=len(labels), fontsize=8)
    return fig
