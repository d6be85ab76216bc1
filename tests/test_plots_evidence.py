"""Each evidence figure helper returns a Figure with the expected panels, lines and labels."""

from __future__ import annotations

import pytest
from matplotlib.figure import Figure

from layernorm_tutorial.lab.evidence import plots as pe
from layernorm_tutorial.lab.evidence.synthetic import synthetic_results


@pytest.fixture(scope="module")
def doc():
    return synthetic_results()


def test_batch_size_figure(doc):
    fig = pe.plot_batch_size(doc)
    assert isinstance(fig, Figure)
    left, right = fig.axes
    assert len(left.containers) == 3            # none, BN, LN with error bars
    assert [t.get_text() for t in left.get_legend().get_texts()] == \
        ["no norm", "BatchNorm", "LayerNorm"]
    assert left.get_xscale() == "log" and "batch size" in left.get_xlabel()
    assert "accuracy (%)" in left.get_ylabel()
    assert len(right.get_lines()) == 4          # BN and LN, two modes each
    sizes = [2, 8, 16, 32, 64, 128, 256]
    assert list(right.get_lines()[0].get_xdata()) == sizes
    assert "cross-entropy" in right.get_ylabel()


def test_cnn_rnn_figure(doc):
    fig = pe.plot_cnn_rnn(doc)
    cnn, rnn = fig.axes
    assert len(cnn.patches) == 5 and len(rnn.patches) == 3
    assert cnn.patches[0].get_height() == pytest.approx(95.3, abs=1e-6)  # mean of seeds 1-5
    assert [t.get_text() for t in rnn.get_xticklabels()] == ["no norm", "BatchNorm", "LayerNorm"]
    assert "4 epochs" in cnn.get_title() and "6 epochs" in rnn.get_title()


def test_gap_figure(doc):
    fig = pe.plot_generalization_gap(doc)
    mlp, cnn = fig.axes
    assert len(mlp.patches) == 3 and len(cnn.patches) == 5
    assert mlp.patches[1].get_height() == pytest.approx(2.0, abs=1e-6)   # the synthetic gap
    assert "pp" in mlp.get_ylabel()


def test_learning_curve_figure(doc):
    fig = pe.plot_learning_curves(doc)
    assert len(fig.axes) == 3
    assert [len(ax.get_lines()) for ax in fig.axes] == [3, 5, 3]
    assert fig.axes[0].get_yscale() == "log" and fig.axes[0].get_xlabel() == "optimizer step"
    assert len(fig.legends) == 1


def test_rate_range_figure(doc):
    fig = pe.plot_rate_ranges(doc)
    mlp, rnn = fig.axes
    assert [ax.get_title() for ax in fig.axes] == ["MLP, batch 32", "RNN, batch 32"]
    assert len(mlp.get_lines()) == 4          # three norms and the chance line
    assert len(mlp.get_lines()[0].get_xdata()) == 7   # the seven rungs 1e-3 .. 1
    assert mlp.get_xscale() == "log" and "learning rate" in mlp.get_xlabel()
    assert "validation accuracy (%)" in mlp.get_ylabel() and len(fig.legends) == 1


def test_gradients_at_init_figure():
    import numpy as np

    from layernorm_tutorial.lab.evidence import side_plots as ps

    grads = np.exp(np.random.default_rng(0).normal(size=(3, 2, 3, 5)))
    fig = ps.plot_gradients_at_init(grads, ("none", "bn", "ln"), (0.5, 2.0))
    assert len(fig.axes) == 3 and [ax.get_title() for ax in fig.axes] == \
        ["no norm", "BatchNorm", "LayerNorm"]
    assert all(len(ax.get_lines()) == 2 and ax.get_yscale() == "log" for ax in fig.axes)
    assert fig.axes[0].get_ylim() == fig.axes[2].get_ylim()      # one y range for all panels
    assert list(fig.axes[0].get_lines()[0].get_xdata()) == [1, 2, 3, 4, 5]
    assert "initialization" in fig.axes[0].get_ylabel()
    with pytest.raises(ValueError, match="grads"):
        ps.plot_gradients_at_init(grads[0], ("none",), (0.5, 2.0))


def test_init_scale_and_combination_figures():
    import numpy as np

    from layernorm_tutorial.lab.evidence import side_plots as ps
    from layernorm_tutorial.lab.evidence.bn_init import InitScaleResult
    from layernorm_tutorial.lab.evidence.combinations import CombinationResult

    acc = np.full((2, 3, 3), 0.9)
    fig = ps.plot_init_scale_accuracy(InitScaleResult(("none", "bn"), (0.5, 1.0, 2.0),
                                                      (0, 1, 2), acc))
    ax = fig.axes[0]
    assert len(ax.containers) == 2 and ax.get_xscale() == "log"
    assert "initialization scale" in ax.get_xlabel() and "accuracy (%)" in ax.get_ylabel()
    test_acc = np.array([[0.9, 0.92, 0.94], [0.8, 0.8, 0.8]])
    fig = ps.plot_combinations(CombinationResult(("A + B", "C"), (0, 1, 2), test_acc, test_acc))
    ax = fig.axes[0]
    assert len(ax.patches) == 2
    assert ax.patches[0].get_height() == pytest.approx(92.0)
    assert [t.get_text() for t in ax.get_xticklabels()] == ["A +\nB", "C"]
