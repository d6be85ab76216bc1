"""The residual chapter's figure helpers return labelled figures with the expected lines."""

import numpy as np
from matplotlib.figure import Figure

from layernorm_tutorial.lab.residual import plots


def _fake_variance_result(depth=5):
    v = np.arange(1.0, depth + 2)
    return {"variance": v, "predicted": v[1:], "branch_variance": np.ones(depth),
            "input_correlation": 1 / np.sqrt(v)}


def test_variance_by_depth_has_measured_and_predicted_series():
    fig = plots.plot_variance_by_depth({"plain": _fake_variance_result(),
                                        "residual": _fake_variance_result()})
    assert isinstance(fig, Figure) and len(fig.axes) == 2
    ax_var, ax_corr = fig.axes
    assert len(ax_var.lines) == 4 and ax_var.get_yscale() == "log"
    assert len(ax_corr.lines) == 3  # two curves and the zero line
    assert "v_l" in ax_var.get_ylabel() and ax_var.get_xlabel() == "layer l"


def test_gradient_norm_per_layer_one_line_per_arrangement():
    fig = plots.plot_gradient_norm_per_layer({"post-LN": np.ones(6), "pre-LN": np.ones(6)})
    (ax,) = fig.axes
    assert len(ax.lines) == 2 and list(ax.lines[0].get_xdata()) == [1, 2, 3, 4, 5, 6]
    assert "layer index" in ax.get_xlabel()


def test_loss_curves_with_chance_line():
    fig = plots.plot_loss_curves({"a": [2.0, 1.0], "b": [2.0, 1.5]}, chance=2.08)
    (ax,) = fig.axes
    assert len(ax.lines) == 3 and ax.get_ylabel().startswith("training cross-entropy")


def test_depth_sweep_one_panel_per_arrangement():
    curves = {(a, n): [2.0, 1.5, 1.0] for a in ("post-LN", "pre-LN") for n in (6, 12, 24)}
    fig = plots.plot_depth_sweep(curves, chance=2.08)
    assert [ax.get_title() for ax in fig.axes] == ["post-LN", "pre-LN"]
    assert all(len(ax.lines) == 4 for ax in fig.axes)


def test_gradient_norm_per_layer_several_seeds_draw_mean_and_band():
    seeds = np.array([[1.0, 2.0, 3.0], [3.0, 4.0, 5.0]])
    fig = plots.plot_gradient_norm_per_layer({"pre-LN": seeds})
    (ax,) = fig.axes
    assert list(ax.lines[0].get_ydata()) == [2.0, 3.0, 4.0]  # the mean over seeds
    assert len(ax.collections) == 1  # the min-max band
    assert "mean of 2" in ax.get_legend().get_texts()[0].get_text()


def test_gradient_norm_per_layer_rejects_three_dimensional_input():
    import pytest

    with pytest.raises(ValueError, match="1-D"):
        plots.plot_gradient_norm_per_layer({"x": np.ones((2, 3, 4))})


def test_loss_curves_several_seeds_mean_line():
    fig = plots.plot_loss_curves({"a": np.array([[2.0, 1.0], [2.0, 3.0]])})
    (ax,) = fig.axes
    assert list(ax.lines[0].get_ydata()) == [2.0, 2.0] and len(ax.collections) == 1


def test_gradient_heatmaps_share_one_log_colour_scale():
    panels = {"post-LN": np.full((4, 3), 0.1), "pre-LN": np.full((4, 3), 1.0)}
    panels["pre-LN"][0, 0] = 10.0
    fig = plots.plot_gradient_heatmaps(panels)
    images = [ax.images[0] for ax in fig.axes if ax.images]
    assert [ax.get_title() for ax in fig.axes[:2]] == ["post-LN", "pre-LN"]
    assert len(images) == 2
    assert all(im.norm.vmin == 0.1 and im.norm.vmax == 10.0 for im in images)
    assert images[0].get_array().shape == (3, 4)  # layers on the y axis, steps on x
    assert fig.axes[0].get_ylabel().startswith("layer")


def test_variance_by_depth_with_probes_draws_probe_and_dotted_correlation():
    probe = {"probe_r2": np.linspace(1, 0, 6), "input_correlation": np.linspace(1, 0, 6)}
    fig = plots.plot_variance_by_depth({"plain": _fake_variance_result(),
                                        "residual": _fake_variance_result()},
                                       probes={"plain": probe})
    _, ax_corr = fig.axes
    styles = [line.get_linestyle() for line in ax_corr.lines]
    assert styles.count(":") == 2 and styles.count("-") == 2  # 1 probe + the zero line
    assert "R^2" in ax_corr.get_ylabel()


def test_loss_panels_share_y_and_draw_bands():
    runs = np.array([[2.0, 1.0], [2.0, 3.0]])
    fig = plots.plot_loss_panels({"post-LN": {"a": runs, "b": runs},
                                  "pre-LN": {"a": runs, "b": runs}}, chance=2.08)
    left, right = fig.axes
    assert [left.get_title(), right.get_title()] == ["post-LN", "pre-LN"]
    assert len(left.lines) == 3 and len(left.collections) == 2
    assert left.get_shared_y_axes().joined(left, right)


def test_depth_sweep_accepts_several_seeds():
    curves = {(a, n): np.array([[2.0, 1.0], [2.0, 1.4]]) for a in ("post-LN",) for n in (6, 24)}
    fig = plots.plot_depth_sweep(curves)
    (ax,) = fig.axes
    assert list(ax.lines[0].get_ydata()) == [2.0, 1.2] and len(ax.collections) == 2
