"""Each plotting helper of the principles chapters returns a labelled Figure."""

import numpy as np
import pytest
from matplotlib.figure import Figure

from layernorm_tutorial.lab.common.training import TrainingResult
from layernorm_tutorial.lab.principles import plots as p


def _labels(ax):
    return ax.get_xlabel(), ax.get_ylabel()


def test_row_distribution():
    rng = np.random.default_rng(0)
    row = rng.standard_normal(64) * 3 + 2
    fig = p.plot_row_distribution(row, (row - row.mean()) / row.std())
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    assert all(all(_labels(ax)) for ax in fig.axes)
    assert fig.axes[1].get_legend() is not None
    with pytest.raises(ValueError):
        p.plot_row_distribution(row, row[:3])


def test_relu_active_fraction():
    r = np.linspace(-2, 2, 5)
    fig = p.plot_relu_active_fraction(r, {"normal": r * 0 + 0.5, "skewed": r * 0}, r * 0 + 0.5)
    ax = fig.axes[0]
    assert len(ax.lines) == 3 and all(_labels(ax))
    assert len(ax.get_legend().get_texts()) == 3


def test_loss_curves():
    runs = {"a": TrainingResult([2.0, 1.0], [2.1, 1.2]), "b": TrainingResult([2.3, 2.3],
                                                                           [2.3, 2.3])}
    ax = p.plot_loss_curves(runs).axes[0]
    assert len(ax.lines) == 5  # two per run plus the chance level
    assert "loss" in ax.get_ylabel()


def test_loss_curves_with_seed_bands():
    runs = {"a": [TrainingResult([2.0, 1.0], [2.1, 1.2]), TrainingResult([2.2, 0.8, 0.5],
                                                                          [2.0, 1.0, 0.9])],
            "b": TrainingResult([2.3, 2.3], [2.3, 2.3])}
    ax = p.plot_loss_curves(runs).axes[0]
    assert len(ax.lines) == 5 and len(ax.collections) == 1   # one band, for the seeded run
    np.testing.assert_allclose(ax.lines[0].get_ydata(), [2.1, 0.9])  # mean over seeds
    assert "2 seeds" in ax.get_legend().get_texts()[0].get_text()
    with pytest.raises(ValueError, match="no run"):
        p.plot_loss_curves({"empty": []})


def test_init_scale_sweep():
    from layernorm_tutorial.lab.principles.init_sensitivity import InitScaleSweep

    acc = np.random.default_rng(0).uniform(0.1, 1.0, size=(2, 2, 3, 3))
    sweep = InitScaleSweep((0.5, 1.0, 2.0), (0.02, 0.1), (0, 1, 2), 15, acc, acc, acc < 0)
    fig = p.plot_init_scale_sweep(sweep, marks={"He": 1.0})
    assert len(fig.axes) == 2
    for ax, lr in zip(fig.axes, (0.02, 0.1), strict=True):
        assert ax.get_xscale() == "log" and str(lr) in ax.get_title()
        assert "scale" in ax.get_xlabel()
    assert "accuracy" in fig.axes[0].get_ylabel()
    means = fig.axes[0].lines[0].get_ydata()
    np.testing.assert_allclose(means, acc[0, 0].mean(-1))
    labels = [t.get_text() for t in fig.legends[0].get_texts()]
    assert len(labels) == 4 and any("He" in label for label in labels)


def test_variance_errors():
    result = {"offsets": [1, 10, 100], "naive": [1e-7, 1e-5, 0.0], "two-pass": [1e-8] * 3,
              "Welford": [1e-7] * 3}
    ax = p.plot_variance_errors(result).axes[0]
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert len(ax.lines) == 5 and all(_labels(ax))


def test_eps_placement_and_annotated_vs_torch():
    s = np.logspace(-4, 0, 5)
    ax = p.plot_eps_placement(s, {"inside": s, "outside": s}, eps_marks={"x": 1e-2}).axes[0]
    assert len(ax.lines) == 3 and all(_labels(ax))
    result = {"H": [2, 8], "median_rel": [0.3, 0.06], "predicted_rel": [0.29, 0.06],
              "max_abs": [0.3, 0.1]}
    ax = p.plot_annotated_vs_torch(result).axes[0]
    assert len(ax.lines) == 3 and "H" in ax.get_xlabel()


def test_jacobian():
    J = np.eye(4) - 0.25
    fig = p.plot_jacobian(J, np.linalg.eigvalsh(J))
    assert len(fig.axes) == 3  # two panels and a colour bar
    assert len(fig.axes[1].lines) == 1
    with pytest.raises(ValueError, match="square"):
        p.plot_jacobian(np.ones((2, 3)), [1, 2])
