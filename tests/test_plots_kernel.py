"""The kernel chapter's figures: right number of panels, lines, labels."""

import pytest
from matplotlib.figure import Figure

from layernorm_tutorial.lab.gpu_kernel.plots import plot_bandwidth, plot_roofline


def test_roofline_has_roof_ridge_and_one_marker_per_point():
    fig = plot_roofline(10.0, 100.0, [("fwd", 0.9, 4.0), ("bwd", 1.1, 3.0)], hardware="cpu")
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    assert len(ax.lines) == 1 + 1 + 2  # roof, ridge, two kernels
    assert ax.get_xscale() == "log" and ax.get_yscale() == "log"
    assert "flop/byte" in ax.get_xlabel() and "GFLOP/s" in ax.get_ylabel()
    roof_y = ax.lines[0].get_ydata()
    assert roof_y.max() == pytest.approx(100.0)  # flat compute roof
    assert len(ax.get_legend().get_texts()) == 4
    with pytest.raises(ValueError):
        plot_roofline(0.0, 1.0, [])


def test_bandwidth_bars_per_direction_with_copy_line():
    rows = [dict(implementation=i, shape="8x32", direction=d, gbps=g)
            for d in ("fwd", "bwd") for i, g in (("composite", 1.0), ("torch_native", 3.0))]
    rows.append(dict(implementation="other", shape="4x4", direction="fwd", gbps=9.0))
    rows.append(dict(implementation="copy", shape="8x32", direction="fwd", gbps=5.0))
    fig = plot_bandwidth(rows, copy_gbps=5.0)
    assert len(fig.axes) == 2
    for ax in fig.axes:
        assert len(ax.patches) == 2  # only the 8x32 rows, the copy as a line only
        assert "GB/s" in ax.get_xlabel()
        assert len(ax.lines) == 1
    with pytest.raises(ValueError):
        plot_bandwidth([], 1.0)
