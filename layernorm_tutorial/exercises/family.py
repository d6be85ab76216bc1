"""Checkers (and reference solutions) for the exercises of the family and LN-vs-BN chapters.

Each ``check_*`` takes the reader's function, runs it on random inputs and edge cases, and
returns a :class:`CheckResult` whose message names the mistake when it recognises one.

norm_family: :func:`check_group_norm`, :func:`check_weight_norm`
ln_vs_bn:    :func:`check_running_update`, :func:`check_masked_batch_norm`,
             :func:`check_combine_statistics`
"""

from __future__ import annotations

import torch

from .. import functional
from .. import weight_norm as wn
from ._checking import CheckResult, allclose

# ---- reference solutions ----------------------------------------------------------------


def reference_group_norm(x: torch.Tensor, num_groups: int, eps: float = 1e-5) -> torch.Tensor:
    """Group norm without affine for x of shape (N, C, *spatial): reshape, normalize, undo."""
    n, c = x.shape[:2]
    grouped = x.reshape(n, num_groups, -1)  # contiguous blocks of C // G channels
    mean = grouped.mean(dim=-1, keepdim=True)
    var = ((grouped - mean) ** 2).mean(dim=-1, keepdim=True)
    return ((grouped - mean) / torch.sqrt(var + eps)).reshape(x.shape)


def reference_weight_norm(v: torch.Tensor, g: torch.Tensor, dim=0) -> torch.Tensor:
    """w = g * v / ||v||, the norm over every axis except ``dim`` (whole tensor if None)."""
    return wn.weight_norm(v, g, dim)


def reference_running_update(running_mean, running_var, batch, momentum, step):
    """New (running_mean, running_var) after one training batch of shape (N, C).

    ``momentum=None`` means the cumulative average: factor 1 / step, where ``step`` counts
    the batches seen including this one. The running variance uses the unbiased batch variance.
    """
    factor = 1.0 / step if momentum is None else momentum
    n = batch.shape[0]
    mean = batch.mean(dim=0)
    unbiased = ((batch - mean) ** 2).sum(dim=0) / (n - 1)
    return ((1 - factor) * running_mean + factor * mean,
            (1 - factor) * running_var + factor * unbiased)


def reference_masked_batch_norm(x, mask, eps: float = 1e-5):
    """Batch norm of x (B, T, C) per channel over the real tokens only (mask True = real).

    Padding positions are returned as 0.
    """
    real = x[mask]  # (number of real tokens, C)
    mean = real.mean(dim=0)
    var = ((real - mean) ** 2).mean(dim=0)
    out = (x - mean) / torch.sqrt(var + eps)
    return out * mask.unsqueeze(-1).to(x.dtype)


def reference_combine_statistics(counts, means, variances):
    """Merge per-rank (count, mean, biased variance) into the statistics of the union.

    mean = sum n_r m_r / n;  var = sum n_r (v_r + (m_r - mean)^2) / n  (Chan et al. 1983).
    """
    counts = torch.as_tensor(counts, dtype=torch.float64).reshape(-1, *[1] * (means.dim() - 1))
    total = counts.sum()
    mean = (counts * means).sum(dim=0) / total
    var = (counts * (variances + (means - mean) ** 2)).sum(dim=0) / total
    return mean, var


# ---- checkers ---------------------------------------------------------------------------


def _call(fn, *args):
    try:
        return fn(*args), None
    except Exception as err:  # the reader's bug is reported, not raised
        return None, CheckResult(False, f"your function raised {type(err).__name__}: {err}")


def check_group_norm(fn) -> CheckResult:
    """``fn(x, num_groups, eps)`` must equal ``functional.group_norm`` without affine."""
    gen = torch.Generator().manual_seed(0)
    x = torch.randn(3, 6, 4, 5, generator=gen, dtype=torch.float64) * 3 + 1
    x[:, 3:] *= 5  # channel blocks with different scales make wrong groupings visible
    for groups in (1, 2, 3, 6):
        got, error = _call(fn, x, groups, 1e-5)
        if error is not None:
            return error
        want = functional.group_norm(x, groups, eps=1e-5)
        if allclose(got, want, rtol=1e-6, atol=1e-8):
            continue
        if got is None or tuple(got.shape) != tuple(x.shape):
            return CheckResult(False, f"output shape {getattr(got, 'shape', None)} should be "
                               f"the input's {tuple(x.shape)}")
        interleaved = x.reshape(3, 6 // groups, groups, 4, 5).transpose(1, 2)
        inter = reference_group_norm(interleaved.reshape(x.shape), groups)
        inter = inter.reshape(3, groups, 6 // groups, 4, 5).transpose(1, 2).reshape(x.shape)
        if allclose(got, inter, rtol=1e-6, atol=1e-8):
            return CheckResult(False, "groups are interleaved (channel c in group c % G): "
                               "a group is a contiguous block of C // G channels")
        if allclose(got, functional.layer_norm(x, x.shape[1:]), rtol=1e-6, atol=1e-8):
            return CheckResult(False, f"with G={groups} you normalized over all channels: "
                               "num_groups is ignored")
        if allclose(got, functional.instance_norm(x), rtol=1e-6, atol=1e-8):
            return CheckResult(False, f"with G={groups} you normalized each channel alone")
        grouped = x.reshape(3, groups, -1)
        unbiased = (grouped - grouped.mean(-1, keepdim=True)) / torch.sqrt(
            grouped.var(-1, unbiased=True, keepdim=True) + 1e-5)
        if allclose(got, unbiased.reshape(x.shape), rtol=1e-6, atol=1e-8):
            return CheckResult(False, "variance is unbiased: divide by the count, not count-1")
        return CheckResult(False, f"output differs from group norm with G={groups} (max "
                           f"|error| {float((got - want).abs().max()):.3g})")
    return CheckResult(True, "matches group norm for G = 1, 2, 3, 6 (G=1 is layer norm over "
                       "(C,H,W), G=C is instance norm)")


def check_weight_norm(fn) -> CheckResult:
    """``fn(v, g, dim)`` must equal ``torch._weight_norm`` for dim 0, 1 and None."""
    gen = torch.Generator().manual_seed(1)
    v = torch.randn(4, 3, 2, generator=gen, dtype=torch.float64)
    for dim in (0, 1, None):
        g = wn.norm_except_dim(v, dim) * 0 + 2.0
        got, error = _call(fn, v, g, dim)
        if error is not None:
            return error
        want = torch._weight_norm(v, g, -1 if dim is None else dim)
        if allclose(got, want, rtol=1e-9, atol=1e-12):
            continue
        if dim is not None:
            wrong = v * 2.0 / torch.sqrt((v * v).sum(dim=dim, keepdim=True))
            if allclose(got, wrong, rtol=1e-9, atol=1e-12):
                return CheckResult(False, f"dim={dim}: you took the norm along dim; it runs "
                                   "over every axis EXCEPT dim (one norm per slice along dim)")
        return CheckResult(False, f"dim={dim}: output differs from g * v / ||v|| (max |error| "
                           f"{float((torch.as_tensor(got) - want).abs().max()):.3g})")
    return CheckResult(True, "matches torch's weight norm for dim = 0, 1 and None")


def check_running_update(fn) -> CheckResult:
    """``fn(running_mean, running_var, batch, momentum, step)`` must match torch's buffers."""
    gen = torch.Generator().manual_seed(2)
    for momentum in (0.1, 0.5, None):
        rm = torch.zeros(3, dtype=torch.float64)
        rv = torch.ones(3, dtype=torch.float64)
        bn = torch.nn.BatchNorm1d(3, momentum=momentum).double()
        for step in range(1, 4):
            batch = torch.randn(5, 3, generator=gen, dtype=torch.float64) * 2 + step
            bn(batch)
            result, error = _call(fn, rm, rv, batch, momentum, step)
            if error is not None:
                return error
            new_mean, new_var = result
            if allclose(new_mean, bn.running_mean) and allclose(new_var, bn.running_var):
                rm, rv = new_mean, new_var
                continue
            if momentum is None:
                return CheckResult(False, "momentum=None is the cumulative average: use the "
                                   "factor 1/step (step counts this batch too)")
            mean, biased = batch.mean(0), batch.var(0, unbiased=False)
            if allclose(new_mean, momentum * rm + (1 - momentum) * mean):
                return CheckResult(False, "momentum is the weight of the NEW batch in torch: "
                                   "new = (1 - momentum) * old + momentum * batch")
            if allclose(new_var, (1 - momentum) * rv + momentum * biased):
                return CheckResult(False, "the running variance uses the UNBIASED batch "
                                   "variance (divide by N-1), although normalization uses "
                                   "the biased one")
            return CheckResult(False, f"momentum={momentum}, step {step}: running statistics "
                               "differ from torch's BatchNorm1d")
    return CheckResult(True, "running mean and variance match torch's BatchNorm1d for "
                       "momentum 0.1, 0.5 and None over three steps")


def check_masked_batch_norm(fn) -> CheckResult:
    """``fn(x, mask)`` must normalize real tokens with statistics of real tokens only."""
    gen = torch.Generator().manual_seed(3)
    x = torch.randn(3, 6, 4, generator=gen, dtype=torch.float64) * 2 + 1
    lengths = torch.tensor([6, 3, 2])
    mask = torch.arange(6).unsqueeze(0) < lengths.unsqueeze(1)
    x = x * mask.unsqueeze(-1)  # padding positions hold zeros, as after embedding a pad id
    got, error = _call(fn, x, mask)
    if error is not None:
        return error
    want = reference_masked_batch_norm(x, mask)
    if got is None or tuple(got.shape) != tuple(x.shape):
        return CheckResult(False, f"output shape should be {tuple(x.shape)}")
    if allclose(got[mask], want[mask], rtol=1e-6, atol=1e-8):
        return CheckResult(True, "real tokens are normalized with statistics of the 11 real "
                           "tokens only; padding does not leak in")
    plain = functional.batch_norm(x.transpose(1, 2), None, None, training=True).transpose(1, 2)
    if allclose(got[mask], plain[mask], rtol=1e-6, atol=1e-8):
        return CheckResult(False, "the statistics include the padding positions")
    return CheckResult(False, "real tokens' outputs differ from batch norm over the real tokens"
                       f" (max |error| {float((got[mask] - want[mask]).abs().max()):.3g})")


def check_combine_statistics(fn) -> CheckResult:
    """``fn(counts, means, variances)`` must return the union's mean and biased variance."""
    gen = torch.Generator().manual_seed(4)
    shards = [torch.randn(n, 3, generator=gen, dtype=torch.float64) * s + o
              for n, s, o in ((5, 1.0, 0.0), (9, 2.0, 3.0), (2, 0.5, -1.0))]
    counts = [s.shape[0] for s in shards]
    means = torch.stack([s.mean(0) for s in shards])
    variances = torch.stack([s.var(0, unbiased=False) for s in shards])
    result, error = _call(fn, counts, means, variances)
    if error is not None:
        return error
    full = torch.cat(shards)
    mean, var = result
    if not allclose(mean, full.mean(0)):
        if allclose(mean, means.mean(0)):
            return CheckResult(False, "the mean averages the shard means without weighting "
                               "by their counts")
        return CheckResult(False, "the combined mean is wrong")
    if allclose(var, full.var(0, unbiased=False)):
        return CheckResult(True, "mean and variance equal those of the concatenated shards "
                           "(unequal shard sizes included)")
    within = (torch.tensor(counts, dtype=torch.float64)[:, None] * variances).sum(0) / full.shape[0]
    if allclose(var, within) or allclose(var, variances.mean(0)):
        return CheckResult(False, "the variance misses the between-shard term "
                           "n_r (m_r - mean)^2: averaging variances is not enough")
    return CheckResult(False, "the combined variance is wrong (biased variance of the union "
                       "expected)")
