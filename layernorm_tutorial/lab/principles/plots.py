"""Figures for the chapters "Principles of Layer Normalization" and "The backward pass".

Each helper takes numbers already computed (by the package or a notebook cell) and returns a
``matplotlib.figure.Figure``; none of them computes anything expensive.
"""

from __future__ import annotations

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure

__all__ = [
    "plot_row_distribution",
    "plot_relu_active_fraction",
    "plot_loss_curves",
    "plot_init_scale_sweep",
    "plot_variance_errors",
    "plot_eps_placement",
    "plot_annotated_vs_torch",
    "plot_jacobian",
]


def _values(array) -> np.ndarray:
    if hasattr(array, "detach"):
        array = array.detach().cpu().numpy()
    return np.asarray(array, dtype=np.float64).ravel()


def plot_row_distribution(row_before, row_after, *, bins: int = 30):
    """Two histograms of one row: its raw values and the same values after normalization.

    Each panel marks the row's mean (solid line) and mean +- one std (dashed lines).
    """
    before, after = _values(row_before), _values(row_after)
    if before.size != after.size or before.size < 2:
        raise ValueError("row_before and row_after must hold the same number (>= 2) of values")
    fig, axes = new_figure(1, 2, height=3.0)
    panels = ((axes[0], before, "input row $x$", "tab:gray"),
              (axes[1], after, r"normalized row $\hat{x}$", "tab:blue"))
    for ax, values, title, color in panels:
        mean, std = values.mean(), values.std()
        ax.hist(values, bins=bins, color=color, alpha=0.8, label="values")
        ax.axvline(mean, color="black", lw=1.5, label=f"mean = {mean:.2f}")
        ax.axvline(mean - std, color="black", lw=1, ls="--", label=f"std = {std:.2f}")
        ax.axvline(mean + std, color="black", lw=1, ls="--")
        ax.set_title(title)
        ax.set_xlabel("feature value (arbitrary units)")
        ax.set_ylabel("number of features")
        ax.legend(fontsize=8, loc="upper left")
    return fig


def plot_relu_active_fraction(ratios, measured: dict, predicted):
    """Fraction of positive units after ``ReLU(gamma * x_hat + beta)`` against ``beta/|gamma|``.

    ``measured`` maps a label (the input distribution) to one fraction per ratio;
    ``predicted`` is the formula's curve, drawn as a line.
    """
    ratios = _values(ratios)
    fig, ax = new_figure(height=3.4)
    ax.plot(ratios, _values(predicted), color="black", lw=2,
            label=r"formula $\Phi(\beta/|\gamma|)$")
    markers = iter(["o", "s", "^", "D"])
    for label, fractions in measured.items():
        ax.plot(ratios, _values(fractions), ls="none", marker=next(markers), ms=4,
                alpha=0.8, label=f"measured: {label}")
    ax.set_xlabel(r"$\beta / |\gamma|$ (dimensionless)")
    ax.set_ylabel("fraction of active units")
    ax.set_ylim(-0.02, 1.02)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_loss_curves(runs: dict):
    """Training (solid) and test (dashed) cross-entropy per epoch for each named run.

    ``runs`` maps a name to an object with ``train_loss`` and ``test_loss`` lists
    (``layernorm_tutorial.lab.common.training.TrainingResult``), or to a list of such objects, one
    per
    seed: then the lines are the mean over seeds and a shaded band spans the smallest to
    the largest training loss.
    """
    fig, ax = new_figure(height=3.4)
    colors = iter(["tab:red", "tab:blue", "tab:green", "tab:purple"])
    for name, run in runs.items():
        color = next(colors)
        seeds = run if isinstance(run, (list, tuple)) else [run]
        if not seeds:
            raise ValueError(f"runs[{name!r}] holds no run")
        length = min(len(r.train_loss) for r in seeds)
        train = np.array([r.train_loss[:length] for r in seeds], dtype=np.float64)
        test = np.array([r.test_loss[:length] for r in seeds], dtype=np.float64)
        epochs = np.arange(1, length + 1)
        suffix = f" (mean of {len(seeds)} seeds)" if len(seeds) > 1 else ""
        ax.plot(epochs, train.mean(0), color=color, lw=2, label=f"{name}: train{suffix}")
        ax.plot(epochs, test.mean(0), color=color, lw=1.5, ls="--", label=f"{name}: test")
        if len(seeds) > 1:
            ax.fill_between(epochs, train.min(0), train.max(0), color=color, alpha=0.2,
                            lw=0)
    ax.axhline(np.log(10), color="gray", lw=1, ls=":", label=r"chance level $\ln 10$")
    ax.set_xlabel("epoch")
    ax.set_ylabel("cross-entropy loss (nats)")
    ax.grid(alpha=0.3)
    ax.legend(fontsize=8)
    return fig


def plot_init_scale_sweep(sweep, *, marks: dict | None = None):
    """Final test accuracy against the initial weight scale, one panel per learning rate.

    ``sweep`` is an ``init_sensitivity.InitScaleSweep``. Each curve (with and without
    LayerNorm) shows the mean over seeds as markers and a line, and vertical bars from the
    smallest to the largest seed; ``marks`` optionally maps a label to a scale drawn as a
    vertical line in every panel. One legend, below the panels.
    """
    lrs = list(sweep.lrs)
    fig, axes = new_figure(1, len(lrs), height=3.9, sharey=True)
    axes = np.atleast_1d(axes)
    scales = np.asarray(sweep.scales, dtype=np.float64)
    styles = ((False, "without LayerNorm", "tab:red", "o"),
              (True, "with LayerNorm", "tab:blue", "s"))
    mark_styles = iter([":", "-.", "--"])
    marks = {text: (position, next(mark_styles)) for text, position in (marks or {}).items()}
    for ax, lr in zip(axes, lrs, strict=True):
        first = ax is axes[0]
        for layer_norm, label, color, marker in styles:
            spread = sweep.spread(layer_norm, lr)
            mean = spread["mean"]
            ax.errorbar(scales, mean, yerr=[mean - spread["min"], spread["max"] - mean],
                        color=color, marker=marker, ms=5, capsize=3, lw=1.5,
                        label=f"{label} (mean; bars: min-max of {len(sweep.seeds)} seeds)"
                        if first else None)
        for text, (position, style) in marks.items():
            ax.axvline(position, color="gray", lw=1, ls=style,
                       label=f"scale = {position:.2g}: {text}" if first else None)
        ax.axhline(0.1, color="silver", lw=1, ls="-",
                   label="chance (10 classes)" if first else None)
        ax.set_xscale("log", base=2)
        ax.set_xlabel("initial weight scale (multiple of He's std)")
        ax.set_title(f"learning rate {lr:g}")
        ax.set_ylim(0, 1.02)
        ax.grid(alpha=0.3)
    axes[0].set_ylabel(f"test accuracy after {sweep.epochs} epochs")
    fig.legend(loc="outside lower center", ncol=2, fontsize=8)
    return fig


def plot_variance_errors(result: dict):
    """Relative error of each variance algorithm against the data's mean offset (log-log).

    ``result`` is the dictionary returned by ``variance.variance_relative_error``.
    """
    offsets = _values(result["offsets"])
    fig, ax = new_figure(height=3.6)
    styles = {"naive": ("tab:red", "o"), "two-pass": ("tab:blue", "s"),
              "Welford": ("tab:green", "^")}
    for name, (color, marker) in styles.items():
        if name in result:
            errors = np.maximum(_values(result[name]), 1e-12)  # exact results on a log axis
            ax.loglog(offsets, errors, color=color, marker=marker, ms=4, label=name)
    ax.axhline(np.finfo(np.float32).eps, color="gray", lw=1, ls=":",
               label="float32 machine epsilon")
    ax.axhline(1.0, color="black", lw=1, ls="--", label="100 % error")
    ax.set_xlabel("mean offset of the row (data std = 1)")
    ax.set_ylabel("median relative error of the variance")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def plot_eps_placement(input_std, output_std: dict, *, eps_marks: dict | None = None):
    """Std of the normalized row against the std of the input row, one line per formula.

    ``output_std`` maps a formula's label to its output std for each input std;
    ``eps_marks`` optionally maps a label to an x position drawn as a vertical dotted line.
    """
    input_std = _values(input_std)
    fig, ax = new_figure(height=3.4)
    for label, values in output_std.items():
        ax.loglog(input_std, _values(values), lw=2, label=label)
    for label, position in (eps_marks or {}).items():
        ax.axvline(position, color="gray", lw=1, ls=":")
        ax.text(position, ax.get_ylim()[0] * 2, f" {label}", fontsize=8, color="gray")
    ax.set_xlabel("std of the input row (arbitrary units)")
    ax.set_ylabel(r"std of the normalized row $\hat{x}$")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def plot_annotated_vs_torch(result: dict):
    """Measured relative gap between the tutorial-style LayerNorm and torch's, against H.

    ``result`` is the dictionary returned by ``variants.difference_vs_torch``.
    """
    H = _values(result["H"])
    fig, ax = new_figure(height=3.4)
    ax.loglog(H, _values(result["median_rel"]), "o", color="tab:red", ms=6,
              label="measured: median |variant - torch| / |torch|")
    ax.loglog(H, _values(result["predicted_rel"]), color="black", lw=1.5,
              label=r"predicted: $1 - \sqrt{(H-1)/H} \approx 1/(2H)$")
    ax.loglog(H, _values(result["max_abs"]), "s", color="tab:blue", ms=5, alpha=0.7,
              label="measured: max |variant - torch|")
    ax.set_xlabel("number of normalized features $H$")
    ax.set_ylabel("difference (relative or absolute)")
    ax.grid(alpha=0.3, which="both")
    ax.legend(fontsize=8)
    return fig


def plot_jacobian(jacobian, eigenvalues):
    """Heat map of a LayerNorm Jacobian (left) and its sorted eigenvalues (right)."""
    J = np.asarray(jacobian.detach().cpu().numpy() if hasattr(jacobian, "detach") else jacobian,
                   dtype=np.float64)
    if J.ndim != 2 or J.shape[0] != J.shape[1]:
        raise ValueError(f"jacobian must be a square matrix, got shape {J.shape}")
    eigs = np.sort(_values(eigenvalues))
    fig, axes = new_figure(1, 2, height=3.2)
    limit = np.abs(J).max()
    image = axes[0].imshow(J, cmap="RdBu_r", vmin=-limit, vmax=limit)
    fig.colorbar(image, ax=axes[0], label=r"$\partial \hat{x}_i / \partial x_j$")
    axes[0].set_xlabel("input feature $j$")
    axes[0].set_ylabel("output feature $i$")
    axes[0].set_title("Jacobian")
    axes[1].plot(np.arange(1, eigs.size + 1), eigs, "o", color="tab:blue", ms=4,
                 label="eigenvalue")
    axes[1].set_xlabel("eigenvalue index (sorted)")
    axes[1].set_ylabel("eigenvalue (1 / input units)")
    axes[1].set_title("spectrum")
    axes[1].grid(alpha=0.3)
    axes[1].legend(fontsize=8)
    return fig
