r"""The batch-norm running-statistics update, written once for the whole package.

In training mode batch norm normalizes with the statistics of the current batch and keeps
exponential moving averages of them for evaluation mode. With :math:`\mu_B` and the *biased*
variance :math:`\sigma_B^2` of the :math:`M` values of one channel in batch :math:`t`,

.. math::
    :label: eq-running-stats

    \hat\mu_t = (1 - m_t)\,\hat\mu_{t-1} + m_t\,\mu_B, \qquad
    \hat\sigma^2_t = (1 - m_t)\,\hat\sigma^2_{t-1} + m_t\,\frac{M}{M-1}\,\sigma_B^2, \qquad
    m_t = \begin{cases} m & \text{momentum } m \text{ given} \\
                        1/t & \text{momentum=None (cumulative average)} \end{cases}

The factor :math:`M/(M-1)` (Bessel's correction) makes the stored variance the *unbiased*
estimate, although the batch itself was normalized with the biased one: torch's convention.
"""

from __future__ import annotations

import numbers

import torch

__all__ = ["update_running_stats", "momentum_factor"]


def momentum_factor(momentum, num_batches_tracked=None) -> float:
    r"""The factor :math:`m_t` of :eq:`eq-running-stats`: ``momentum``, or ``1/t`` for None.

    ``num_batches_tracked`` (int or 0-d tensor) is :math:`t`, the number of batches seen
    *including the current one*; it is only read when ``momentum`` is None.
    """
    if momentum is not None:
        if isinstance(momentum, bool) or not isinstance(momentum, (numbers.Real, torch.Tensor)):
            raise TypeError(f"momentum must be a float or None, got {momentum!r}")
        return float(momentum)
    if num_batches_tracked is None:
        raise ValueError("momentum=None (cumulative average) needs num_batches_tracked, the "
                         "number of batches seen including this one")
    batches = int(num_batches_tracked)
    if batches < 1:
        raise ValueError("num_batches_tracked must count the current batch (>= 1), "
                         f"got {batches}")
    return 1.0 / batches


def update_running_stats(running_mean, running_var, batch_mean, batch_var, count: int,
                         momentum, num_batches_tracked=None) -> None:
    r"""Update ``running_mean`` and ``running_var`` in place by :eq:`eq-running-stats`.

    Shapes: ``running_mean``, ``running_var`` are ``(C,)`` tensors or None (None is
    skipped); ``batch_mean`` and ``batch_var`` hold ``C`` values in any shape (for example
    ``(1, C, 1, 1)``); ``batch_var`` is the *biased* batch variance (divided by ``count``).
    ``count`` is :math:`M`, the number of values behind each channel's statistics (>= 2).
    ``momentum`` is a float or None (cumulative average, which needs
    ``num_batches_tracked``; see :func:`momentum_factor`). Nothing is returned and no
    autograd graph is recorded.
    """
    if running_mean is None and running_var is None:
        return
    if count < 2:
        raise ValueError(f"count must be at least 2 for the unbiased variance M/(M-1), "
                         f"got {count}")
    m = momentum_factor(momentum, num_batches_tracked)
    bessel = count / (count - 1)                                    # M / (M - 1)
    with torch.no_grad():
        if running_mean is not None:
            _blend_(running_mean, batch_mean.detach().reshape(-1), m)            # (C,)
        if running_var is not None:
            _blend_(running_var, batch_var.detach().reshape(-1) * bessel, m)     # (C,)


def _blend_(running: torch.Tensor, batch: torch.Tensor, m: float) -> None:
    """running <- (1 - m) running + m batch, computed in fp32 for fp16/bf16 buffers and
    rounded once into the buffer's dtype (as torch's batch norm does)."""
    acc = torch.float32 if running.dtype in (torch.float16, torch.bfloat16) else running.dtype
    blended = running.to(acc) * (1 - m) + batch.to(acc) * m
    running.copy_(blended)
