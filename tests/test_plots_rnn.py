"""The RNN chapter's figure helpers return labelled figures with the expected lines."""

import numpy as np
from matplotlib.figure import Figure

from layernorm_tutorial.lab.rnn import plots


def test_hidden_state_norms_one_panel_per_setting_and_log_axis():
    panels = {"linear": {"plain": np.geomspace(1, 1e3, 10), "LN": np.ones(10)},
              "tanh": {"plain": np.linspace(1, 0.5, 10), "LN": np.ones(10)}}
    fig = plots.plot_hidden_state_norms(panels)
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and ax.get_yscale() == "log"
    assert ax.get_xlabel() == "time step t" and "h_t" in ax.get_ylabel()


def test_gradient_through_time_uses_distance_from_loss():
    fig = plots.plot_gradient_through_time({"impulse": {"plain": np.geomspace(1e-5, 1, 6)}})
    (ax,) = fig.axes
    xs = ax.lines[0].get_xdata()
    assert list(xs) == [5, 4, 3, 2, 1, 0]
    assert "distance" in ax.get_xlabel() and ax.get_yscale() == "log"


def test_normalized_spread_marks_training_length():
    fig = plots.plot_normalized_spread({"BN": np.ones(30), "LN": np.ones(30)}, train_steps=10)
    (ax,) = fig.axes
    assert len(ax.lines) == 4  # two curves, the training-length marker, the reference line
    assert ax.get_legend() is not None and "std" in ax.get_ylabel()


def test_learning_curves_two_panels_one_line_per_model():
    histories = {k: {"train_loss": [2.0, 1.0, 0.5], "test_accuracy": [0.3, 0.6, 0.8]}
                 for k in ("RNN", "LN-RNN", "BN-RNN")}
    fig = plots.plot_learning_curves(histories)
    assert len(fig.axes) == 2
    assert all(len(ax.lines) == 3 for ax in fig.axes)
    assert fig.axes[1].get_ylabel() == "test accuracy"
