"""The large-models chapter's QK learning-rate figure caps its dots and mean line."""

import math

import numpy as np
from matplotlib.figure import Figure

from layernorm_tutorial.lab.large_models import plots


def _sweep():
    runs = {"none": {"0.01": [{"final_loss": 2.0}, {"final_loss": 2.5}],
                     "1.0": [{"final_loss": 42.0}, {"final_loss": math.nan},
                             {"final_loss": math.inf}]},
            "rmsnorm": {"0.01": [{"final_loss": 0.5}, {"final_loss": 0.7}],
                        "1.0": [{"final_loss": 3.0}, {"final_loss": 91.0}]}}
    return {"runs": runs}


def test_qk_lr_sweep_draws_a_run_above_the_cap_at_the_cap():
    fig = plots.qk_lr_sweep(_sweep())
    assert isinstance(fig, Figure)
    (ax,) = fig.axes
    dots = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections])
    assert np.all(np.isfinite(dots)) and dots.max() == 10.0
    assert sorted(dots) == [0.5, 0.7, 2.0, 2.5, 3.0, 10.0, 10.0, 10.0, 10.0]
    none_line, rms_line = ax.lines[:2]
    assert list(none_line.get_ydata()) == [2.25, 10.0]
    assert list(rms_line.get_ydata()) == [0.6, 6.5]
    assert ax.get_ylim() == (0.0, 10.5) and ax.get_xscale() == "log"
    assert "capped at 10" in ax.get_ylabel()


def test_qk_lr_sweep_cap_is_a_parameter():
    (ax,) = plots.qk_lr_sweep(_sweep(), cap=5.0).axes
    dots = np.concatenate([c.get_offsets()[:, 1] for c in ax.collections])
    assert dots.max() == 5.0 and ax.get_ylim() == (0.0, 5.25)
