r"""Why BatchNorm trains with the current batch's statistics: Ioffe and Szegedy's (2015,
sec. 2) runaway bias, as a float64 computation.

A layer adds a learned bias :math:`b` to its input, :math:`x = u + b`, and is normalized
with statistics computed over the training data, :math:`\hat x = x - \mathrm E[x]`. If the
gradient step ignores that :math:`\mathrm E[x]` depends on :math:`b`, it moves :math:`b` by
:math:`\Delta b \propto -\partial\ell/\partial\hat x`; the statistics, recomputed after the
step, move by the same :math:`\Delta b`, so :math:`\hat x`, the output and the loss are
unchanged, the gradient is the same at the next step, and :math:`b` grows without bound
while the loss stays fixed. When the gradient flows through the statistics (training-mode
BatchNorm on the batch), :math:`\partial\ell/\partial b = \sum_i(\partial\ell/\partial\hat
x_i - \langle\partial\ell/\partial\hat x\rangle) = 0`: the normalization tells the optimizer
that moving :math:`b` does nothing.

:func:`runaway_bias` runs both versions with the package's
:func:`~layernorm_tutorial.functional.batch_norm`: statistics recomputed from the data
before every step and passed in as constants (evaluation mode), or batch statistics inside
the graph (training mode).
"""

from __future__ import annotations

import torch

from layernorm_tutorial import functional as LF

__all__ = ["runaway_bias"]

F64 = torch.float64


def runaway_bias(through_statistics: bool, *, steps: int = 30, lr: float = 0.5,
                 samples: int = 64, features: int = 4, seed: int = 0) -> dict:
    """SGD on the bias ``b`` of ``x = u + b`` (``u``: ``(samples, features)`` data) under
    BatchNorm without affine, the loss pulling the normalized output toward targets whose
    feature means are not 0 (which a centred output can never reach).

    ``through_statistics=False``: the mean and variance of the data are recomputed before each
    step and treated as constants (``training=False`` with them as running statistics);
    ``True``: training-mode BatchNorm, the gradient flowing through the batch statistics.
    Returns ``{"bias_norm": [|b| after each step, starting with the initial 0],
    "loss": [loss before each step], "bias_grad": [|dL/db| at each step]}``."""
    if steps < 1:
        raise ValueError(f"steps must be at least 1, got {steps}")
    g = torch.Generator().manual_seed(seed)
    u = torch.randn(samples, features, generator=g, dtype=F64) * 2.0 + 1.0
    target = torch.randn(samples, features, generator=g, dtype=F64) + 3.0
    b = torch.zeros(features, dtype=F64, requires_grad=True)
    out = {"bias_norm": [0.0], "loss": [], "bias_grad": []}
    for _ in range(steps):
        x = u + b
        if through_statistics:
            y = LF.batch_norm(x, None, None, training=True)
        else:                           # population statistics, held fixed for the step
            with torch.no_grad():
                mean, var = x.mean(0), x.var(0, correction=0)
            y = LF.batch_norm(x, mean, var, training=False)
        loss = ((y - target) ** 2).mean()
        (grad,) = torch.autograd.grad(loss, b)
        with torch.no_grad():
            b -= lr * grad
        out["loss"].append(loss.item())
        out["bias_grad"].append(grad.norm().item())
        out["bias_norm"].append(b.norm().item())
    return out
