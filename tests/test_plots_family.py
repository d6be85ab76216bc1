"""Each family-chapter plotting helper returns a labelled Figure with the expected content."""

import numpy as np
import pytest
from matplotlib.figure import Figure

from layernorm_tutorial.lab.norm_family import plots as pf


@pytest.mark.parametrize("layout,zlabel", [("NCHW", "H·W (pixels)"), ("BTC", "C (channels)")])
def test_family_cubes_has_one_panel_per_member(layout, zlabel):
    fig = pf.family_cubes(layout, num_groups=3)
    assert isinstance(fig, Figure)
    titles = [ax.get_title() for ax in fig.axes]
    assert titles == ["Batch Norm", "Layer Norm", "Instance Norm", "Group Norm (G=3)",
                      "RMS Norm"]
    assert all(ax.get_zlabel() == zlabel for ax in fig.axes)
    assert all(len(ax.collections) > 0 for ax in fig.axes)  # voxels were drawn
    # readable at book width: every panel at least 1.5 inches wide (one row of five gave
    # 0.9), axis labels at least 9 pt
    fig.canvas.draw()
    width = fig.get_size_inches()[0]
    assert all(ax.get_position().width * width >= 1.5 for ax in fig.axes)
    assert all(ax.zaxis.label.get_fontsize() >= 9 for ax in fig.axes)


def test_samples_by_features_writes_column_and_row_means():
    x = np.arange(12.0).reshape(3, 4)
    fig = pf.samples_by_features(x)
    left, right = fig.axes[:2]
    assert [t.get_text() for t in left.texts] == [f"{m:.1f}" for m in x.mean(0)]
    assert [t.get_text() for t in right.texts] == [f"{m:.1f}" for m in x.mean(1)]
    assert left.get_xlabel() == "feature" and left.get_ylabel() == "sample"
    with pytest.raises(ValueError, match="must be 2-D"):
        pf.samples_by_features(np.zeros(3))


def test_line_plots_have_labels_and_one_line_per_curve():
    fig = pf.batch_noise([2, 4, 8], {"a": [1, 0.7, 0.5], "b": [2, 1.4, 1]}, reference_scale=1)
    ax = fig.axes[0]
    assert len(ax.lines) == 3 and "batch size" in ax.get_xlabel()
    assert [t.get_text() for t in ax.get_legend().get_texts()][:2] == ["a", "b"]

    fig = pf.running_statistics(range(4), {"m=0.1": [0, 1, 2, 3]}, 2.0, [1, 2, 3, 4])
    ax = fig.axes[0]
    assert len(ax.lines) == 3 and ax.get_xlabel() == "training step"

    fig = pf.padding_effect([0, 2, 4], {"BN": [0, 0.3, 0.5], "LN": [0, 0, 0]})
    ax = fig.axes[0]
    assert len(ax.lines) == 2 and "padding" in ax.get_xlabel()


def test_style_removal_grid_shares_a_colour_scale_per_column():
    rng = np.random.default_rng(0)
    content = rng.standard_normal((2, 3, 5, 5))
    styled = 3 * content + 1
    same = (content, content)
    outputs = {"Instance Norm": same, "Batch Norm": (content, styled)}
    fig = pf.style_removal(content, styled, outputs, image=1, channel=2)
    images = [ax for ax in fig.axes if ax.images]
    assert len(images) == 6                                   # 2 rows x 3 columns
    assert [ax.get_title() for ax in images[:3]] == ["input", "Instance Norm", "Batch Norm"]
    np.testing.assert_array_equal(images[0].images[0].get_array(), content[1, 2])
    np.testing.assert_array_equal(images[3].images[0].get_array(), styled[1, 2])
    assert images[0].images[0].get_clim() == images[3].images[0].get_clim()
    assert images[3].get_xlabel() == "position w" and "content" in images[0].get_ylabel()
    with pytest.raises(ValueError, match="N, C, H, W"):
        pf.style_removal(content[0], styled[0], {})
