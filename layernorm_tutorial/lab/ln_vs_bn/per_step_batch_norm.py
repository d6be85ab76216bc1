"""BatchNorm for recurrent networks: one set of running statistics per time step.

Used by the per-time-step BatchNorm cells in :mod:`layernorm_tutorial.lab.rnn.cells` (Cooijmans et
al.,
2017) and by the LN-vs-BN chapter, whose point is what happens at a step no training
sequence reached.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from layernorm_tutorial.functional import standardize
from layernorm_tutorial.running_stats import update_running_stats

__all__ = ["PerStepBatchNorm", "UnseenTimeStepError"]


class UnseenTimeStepError(RuntimeError):
    """A per-time-step BatchNorm was asked for a step it has no running statistics for."""


class PerStepBatchNorm(nn.Module):
    """BatchNorm over the batch with one set of running statistics per time step.

    ``forward(a, t)`` normalizes ``a`` of shape ``(B, num_features)`` at time step ``t``
    (0-based). In training mode it uses the batch's mean and biased variance at this step and
    updates ``running_mean[t]``, ``running_var[t]`` by the package's one running-statistics
    update (:func:`layernorm_tutorial.running_stats.update_running_stats`: unbiased variance,
    momentum as in torch);
    in evaluation mode it uses the running statistics of step ``t``. The gain ``weight`` and
    bias are shared across time steps. ``steps_seen`` counts the steps with statistics.

    For ``t >= steps_seen`` in evaluation mode: ``on_unseen_step="error"`` raises
    :class:`UnseenTimeStepError`; ``"reuse_last"`` uses the statistics of step
    ``steps_seen - 1``.
    """

    def __init__(self, num_features: int, max_steps: int = 256, eps: float = 1e-5,
                 momentum: float = 0.1, affine: bool = True, weight_init: float = 1.0,
                 on_unseen_step: str = "error"):
        super().__init__()
        if on_unseen_step not in ("error", "reuse_last"):
            raise ValueError(
                f"on_unseen_step must be 'error' or 'reuse_last', got {on_unseen_step!r}"
            )
        if max_steps <= 0:
            raise ValueError(f"max_steps must be a positive int, got {max_steps!r}")
        self.num_features, self.max_steps = num_features, max_steps
        self.eps, self.momentum, self.on_unseen_step = eps, momentum, on_unseen_step
        if affine:
            self.weight = nn.Parameter(torch.full((num_features,), float(weight_init)))
            self.bias = nn.Parameter(torch.zeros(num_features))
        else:
            self.register_parameter("weight", None)
            self.register_parameter("bias", None)
        self.register_buffer("running_mean", torch.zeros(max_steps, num_features))
        self.register_buffer("running_var", torch.ones(max_steps, num_features))
        self.register_buffer("steps_seen", torch.tensor(0, dtype=torch.long))

    def forward(self, a: Tensor, t: int) -> Tensor:
        if self.training:
            if t >= self.max_steps:
                raise UnseenTimeStepError(
                    f"time step {t} exceeds max_steps={self.max_steps} statistics slots"
                )
            if a.shape[0] < 2:
                raise ValueError(
                    "per-time-step BatchNorm needs more than 1 sample per batch in training, "
                    f"got input of shape {tuple(a.shape)}"
                )
            stats = standardize(a, (0,), self.eps)      # batch mean, biased var over B
            update_running_stats(self.running_mean[t], self.running_var[t], stats.mean,
                                 stats.var, a.shape[0], self.momentum)
            self.steps_seen.fill_(max(int(self.steps_seen), t + 1))
            out = stats.norm
        else:
            seen = int(self.steps_seen)
            if t >= seen:
                if self.on_unseen_step == "error" or seen == 0:
                    raise UnseenTimeStepError(
                        f"no BatchNorm statistics for time step {t}: training sequences had "
                        f"at most {seen} steps (a test sequence longer than every training "
                        "sequence). Use LayerNorm, or on_unseen_step='reuse_last'."
                    )
                t = seen - 1
            out = (a - self.running_mean[t]) * torch.rsqrt(self.running_var[t] + self.eps)
        if self.weight is not None:
            out = out * self.weight + self.bias
        return out
