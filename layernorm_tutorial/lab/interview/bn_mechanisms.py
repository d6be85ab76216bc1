r"""BatchNorm mechanisms that interviewers ask about, each as a small float64 computation.

Nothing here trains a network; every function computes a mechanism at fixed weights, so its
numbers are the same on any CPU to the digits the chapter prints.

``placement(order)``
    A Linear layer followed by BN and ReLU in either order: what the next layer receives
    (mean, standard deviation, fraction of exact zeros per feature) and whether the Linear
    bias still matters (its gradient).
``batch_noise(batch_sizes)``
    The spread of one fixed sample's BN output over random batch-mates: the noise that makes
    BN a (weak) regularizer, which shrinks like :math:`1/\sqrt{B}`.
``dropout_variance_shift(p)``
    Dropout before BN: the running variance learns the training-mode variance
    :math:`((\sigma^2+\mu^2)/(1-p) - \mu^2)`, so in evaluation, where dropout is the identity,
    BN's output variance is :math:`\sigma^2` divided by that, not 1 (the "variance shift").
``dropout_remedy(p)``
    The same pair after re-estimating BN's statistics with only BN in training mode (the
    running variance matches what BN sees at inference again) and with the whole model in
    training mode (dropout on again: the shift comes back).
``weight_scale_invariance(c, lr)``
    A Linear layer feeding BN: the loss ignores the scale :math:`c` of the weights, the
    gradient scales as :math:`1/c` and is orthogonal to :math:`W`, so an SGD step on
    :math:`cW` with rate :math:`c^2\eta` moves the direction exactly as a step on :math:`W`
    with rate :math:`\eta`: the effective rate of the direction is :math:`\eta/\lVert W\rVert^2`.
``weight_norm_vs_batch_norm()``
    Weight normalization (:math:`w = g\,v/\lVert v\rVert`) next to BN on the same layer:
    both make the layer invariant to the weights' scale; only BN standardizes the outputs and
    only BN depends on the batch.
``whitened_equivalence()``
    On whitened inputs (zero mean, identity covariance) one BN layer and one weight-normalized
    layer compute the same thing.
``weight_norm_gradient(lr)``
    Salimans and Kingma's (2016, sec. 2.1) gradient of weight normalization:
    :math:`\nabla_v L = \frac{g}{\lVert v\rVert}(I - \frac{ww^\top}{\lVert w\rVert^2})
    \nabla_w L`, orthogonal to :math:`v`, so an SGD step only lengthens :math:`v`
    (:math:`\lVert v'\rVert^2 = \lVert v\rVert^2 + \eta^2\lVert\nabla_v L\rVert^2`), and
    a longer :math:`v` gets a proportionally smaller gradient.
``preactivation_units(depths)``
    He et al.'s (2016, "Identity mappings") residual units with BN: the original
    (weight, BN, ReLU, weight, BN, add, ReLU) and the full pre-activation one (BN, ReLU,
    weight, BN, ReLU, weight, add). With the branch switched off, only the pre-activation
    unit passes its input through unchanged; and its stream is never normalized, so its
    spread grows with depth (hence the extra BN and ReLU before the classifier).
"""

from __future__ import annotations

import copy
import functools
import math

import torch

from layernorm_tutorial import functional as LF
from layernorm_tutorial import nn as lnn
from layernorm_tutorial import weight_norm as wn
from layernorm_tutorial.lab.interview import distribution_shift

__all__ = ["ORDERS", "placement", "batch_noise", "predicted_batch_noise",
           "dropout_variance_shift", "dropout_remedy", "predicted_eval_variance",
           "weight_scale_invariance", "weight_norm_vs_batch_norm", "whitened_equivalence",
           "weight_norm_gradient", "preactivation_units"]

F64 = torch.float64
ORDERS = ("bn_relu", "relu_bn")


def _gen(seed: int) -> torch.Generator:
    return torch.Generator().manual_seed(seed)


def _keeps_global_rng(fn):
    """Run ``fn`` on a copy of torch's global random state: the dropout functions seed it
    for their masks, and the caller's later draws must not depend on that."""
    @functools.wraps(fn)
    def run(*args, **kwargs):
        with torch.random.fork_rng(devices=[]):
            return fn(*args, **kwargs)
    return run


def placement(order: str, *, width: int = 256, batch: int = 4096, in_features: int = 32,
              weight_scale: float = 1.0, bias: float = 0.5, seed: int = 0) -> dict:
    """Linear(in_features -> width) then ``"bn_relu"`` (BN, then ReLU) or ``"relu_bn"``.

    Returns, for the tensor ``h`` of shape ``(batch, width)`` that the next layer receives:
    ``mean`` and ``std`` (averages over features of each feature's batch mean and biased
    std), ``zero_fraction`` (fraction of exact zeros), ``min_value``; ``bias_grad`` (norm of
    the Linear bias's gradient for a fixed random upstream gradient) and ``scale_change``
    (max change of ``h`` when the Linear weight is multiplied by 10).
    """
    if order not in ORDERS:
        raise ValueError(f"order must be one of {ORDERS}, got {order!r}")
    g = _gen(seed)
    x = torch.randn(batch, in_features, generator=g, dtype=F64) * 2.0 + 1.0
    w = torch.randn(width, in_features, generator=g, dtype=F64) * weight_scale
    b = torch.full((width,), bias, dtype=F64, requires_grad=True)
    upstream = torch.randn(batch, width, generator=g, dtype=F64)

    def layer(weight):
        z = x @ weight.T + b                                   # (batch, width)
        if order == "bn_relu":
            return torch.relu(LF.batch_norm(z, None, None, training=True))
        return LF.batch_norm(torch.relu(z), None, None, training=True)

    h = layer(w)
    (h * upstream).sum().backward()
    h = h.detach()
    with torch.no_grad():
        scale_change = (layer(10 * w) - h).abs().max().item()
    return {"mean": h.mean(0).mean().item(),
            "std": h.std(0, correction=0).mean().item(),
            "zero_fraction": (h == 0).double().mean().item(),
            "min_value": h.min().item(),
            "bias_grad": b.grad.norm().item(),
            "scale_change": scale_change}


def predicted_batch_noise(x0: float, batch_size: int) -> float:
    r"""Delta-method standard deviation of :math:`(x_0-\mu_B)/\sigma_B` for a sample
    :math:`x_0` among :math:`B-1` standard-normal batch-mates: :math:`\sqrt{(1+x_0^2/2)/B}`
    (first order in :math:`1/B`)."""
    return math.sqrt((1 + x0 ** 2 / 2) / batch_size)


def batch_noise(batch_sizes=(8, 32, 128, 512), *, x0: float = 1.0, draws: int = 4000,
                seed: int = 0) -> dict[int, float]:
    """``{B: std}``: the standard deviation, over ``draws`` random batches, of the
    training-mode BN output of one fixed value ``x0`` batched with ``B - 1`` standard-normal
    batch-mates (one feature, so each draw is one BN of a ``(B, 1)`` column)."""
    g = _gen(seed)
    out = {}
    for size in batch_sizes:
        if size < 2:
            raise ValueError(f"batch sizes must be at least 2, got {size}")
        mates = torch.randn(draws, size - 1, generator=g, dtype=F64)
        col = torch.cat([torch.full((draws, 1), x0, dtype=F64), mates], dim=1)
        mean = col.mean(1)
        var = col.var(1, correction=0)
        z0 = (x0 - mean) / torch.sqrt(var + 1e-5)       # BN's output for x0, per draw
        out[size] = z0.std().item()
    return out


def predicted_eval_variance(p: float, mean: float = 0.0, var: float = 1.0) -> float:
    r"""Evaluation-mode output variance of Dropout(p) -> BN when BN's running variance is
    the training-mode variance of the dropped-out input, :math:`(\sigma^2+\mu^2)/(1-p)-\mu^2`
    (inverted dropout: kept values are scaled by :math:`1/(1-p)`)."""
    train_var = (var + mean ** 2) / (1 - p) - mean ** 2
    return var / train_var


def _dropout_then_bn(p: float, features: int, batch: int, mean: float, seed: int,
                     norm=lnn.BatchNorm1d):
    """``(model, inputs)``: ``Dropout(p)`` then a float64 ``norm`` (``BatchNorm1d``, the
    package's or torch's; no affine, cumulative average), and a function drawing fresh
    ``N(mean, 1)`` batches."""
    if not 0 <= p < 1:
        raise ValueError(f"p must be in [0, 1), got {p}")
    # dropout masks come from the global generator: seed it apart from the inputs' own
    # generator (the same seed for both would correlate the masks with the values)
    torch.manual_seed(seed + 1_000_003)
    g = _gen(seed)
    model = torch.nn.Sequential(
        torch.nn.Dropout(p), norm(features, momentum=None, affine=False).double())

    def inputs():
        return torch.randn(batch, features, generator=g, dtype=F64) + mean

    return model, inputs


@torch.no_grad()
def _fill_running_statistics(model, inputs, batches: int) -> torch.Tensor:
    """Training-mode passes over ``batches`` batches (dropout on); the last output."""
    model.train()
    for _ in range(batches):
        out = model(inputs())
    return out


@_keeps_global_rng
def dropout_variance_shift(p: float, *, features: int = 64, batch: int = 1024,
                           batches: int = 50, mean: float = 0.0, seed: int = 0) -> dict:
    """Dropout(p) followed by BatchNorm1d: fill the running statistics over ``batches``
    training-mode batches of ``N(mean, 1)`` inputs (cumulative average, ``momentum=None``),
    then return the output variance in training mode (``train_var``), in evaluation mode on
    fresh inputs (``eval_var``), and ``predicted`` (:func:`predicted_eval_variance`)."""
    model, inputs = _dropout_then_bn(p, features, batch, mean, seed)
    train_out = _fill_running_statistics(model, inputs, batches)
    model.eval()
    with torch.no_grad():
        eval_out = model(inputs())
    return {"train_var": train_out.var(0, correction=0).mean().item(),
            "eval_var": eval_out.var(0, correction=0).mean().item(),
            "predicted": predicted_eval_variance(p, mean)}


@_keeps_global_rng
def dropout_remedy(p: float, *, features: int = 64, batch: int = 1024, batches: int = 50,
                   mean: float = 0.0, seed: int = 0) -> dict:
    r"""The variance shift of Dropout(p) -> BN, and two ways to re-estimate BN's statistics.

    The model (torch's ``BatchNorm1d``) is trained for ``batches`` training-mode batches,
    then its running statistics are recomputed on ``batches`` fresh batches either with
    only BN in training mode (:func:`~.distribution_shift.reestimate_statistics`, dropout
    off) or with the whole model in training mode (``torch.optim.swa_utils.update_bn``, which
    calls ``model.train()``, so dropout is on again). For ``"before"`` (no re-estimation),
    ``"bn_only"`` and ``"whole_model"`` it returns ``{"eval_var": ..., "var_ratio": ...}``:
    the evaluation-mode output variance on fresh inputs, and the ratio of BN's running
    variance to the variance of what BN receives at inference (its input, dropout off):
    :math:`1/(1-p)` for zero-mean inputs while the shift is there, 1 once it is gone."""
    model, inputs = _dropout_then_bn(p, features, batch, mean, seed, norm=torch.nn.BatchNorm1d)
    _fill_running_statistics(model, inputs, batches)
    fresh = [inputs() for _ in range(batches)]
    probe = inputs()
    whole = copy.deepcopy(model)
    torch.optim.swa_utils.update_bn(fresh, whole)
    bn_only = distribution_shift.reestimate_statistics(copy.deepcopy(model), fresh)
    out = {}
    for name, m in (("before", model), ("bn_only", bn_only), ("whole_model", whole)):
        m.eval()
        with torch.no_grad():
            out[name] = {"eval_var": m(probe).var(0, correction=0).mean().item(),
                         "var_ratio": (m[1].running_var / probe.var(0)).mean().item()}
    return out


def weight_scale_invariance(c: float = 10.0, lr: float = 0.1, *, seed: int = 0) -> dict:
    r"""Linear (no bias) -> BN (training mode) -> a fixed linear loss, at ``W`` and ``c W``.

    Returns ``loss_change`` (|L(cW) - L(W)|), ``grad_ratio`` (|grad at W| / |grad at cW|,
    equal to ``c``), ``cosine`` (between the gradient and ``W``: 0), ``norm_growth``
    (``|W'|^2 - |W|^2 - lr^2 |g|^2`` after one SGD step: 0, the norm only grows) and
    ``direction_gap`` (max difference between the directions of ``W`` after a step with rate
    ``lr`` and of ``cW`` after a step with rate ``c^2 lr``: 0)."""
    g = _gen(seed)
    x = torch.randn(64, 16, generator=g, dtype=F64)
    target = torch.randn(64, 8, generator=g, dtype=F64)
    w = torch.randn(8, 16, generator=g, dtype=F64)

    def loss_and_grad(weight):
        weight = weight.clone().requires_grad_(True)
        loss = (LF.batch_norm(x @ weight.T, None, None, training=True, eps=1e-12)
                * target).sum()
        loss.backward()
        return loss.item(), weight.grad

    loss1, g1 = loss_and_grad(w)
    loss_c, g_c = loss_and_grad(c * w)
    step1 = w - lr * g1
    step_c = c * w - c ** 2 * lr * g_c

    def direction(t):
        return t / t.norm()

    return {"loss_change": abs(loss_c - loss1),
            "grad_ratio": (g1.norm() / g_c.norm()).item(),
            "cosine": ((g1 * w).sum() / (g1.norm() * w.norm())).item(),
            "norm_growth": (step1.norm() ** 2 - w.norm() ** 2
                            - lr ** 2 * g1.norm() ** 2).item(),
            "direction_gap": (direction(step1) - direction(step_c)).abs().max().item()}


def weight_norm_vs_batch_norm(*, seed: int = 0) -> dict:
    """One Linear layer (8 -> 4 units) as weight-normalized ``g v / |v|`` and as ``W`` then
    BN, on a batch of 32. Returns, for each of ``"weight_norm"`` and ``"batch_norm"``:
    ``mates_change`` (change of sample 0's output when the other samples change),
    ``input_x10`` (ratio of the output std with the input multiplied by 10 to without),
    ``v_x10_change`` (change of the output when the weights are multiplied by 10) and
    ``output_std`` (mean over units of the output's batch std)."""
    g = _gen(seed)
    x = torch.randn(32, 8, generator=g, dtype=F64) * 3
    other = x.clone()
    other[1:] = torch.randn(31, 8, generator=g, dtype=F64) * 3 + 2
    v = torch.randn(4, 8, generator=g, dtype=F64)
    gain = torch.full((4, 1), 1.0, dtype=F64)

    def wn_layer(inp, weight):
        return inp @ wn.weight_norm(weight, gain, dim=0).T

    def bn_layer(inp, weight):
        return LF.batch_norm(inp @ weight.T, None, None, training=True)

    out = {}
    for name, layer in (("weight_norm", wn_layer), ("batch_norm", bn_layer)):
        y = layer(x, v)
        out[name] = {
            "mates_change": (layer(other, v)[0] - y[0]).abs().max().item(),
            "input_x10": (layer(10 * x, v).std(0) / y.std(0)).mean().item(),
            "v_x10_change": (layer(x, 10 * v) - y).abs().max().item(),
            "output_std": y.std(0, correction=0).mean().item(),
        }
    return out


def whitened_equivalence(*, batch: int = 64, features: int = 8, units: int = 4,
                         seed: int = 0) -> dict:
    r"""Salimans and Kingma's link between the two: for one layer whose inputs are whitened
    (zero mean, identity covariance over the batch), the pre-activation :math:`v\cdot x` has
    batch mean 0 and biased standard deviation :math:`\lVert v\rVert`, so training-mode BN
    (no affine, :math:`\epsilon \to 0`; the code uses 1e-12) computes
    :math:`v\cdot x/\lVert v\rVert`, the weight-normalized unit with :math:`g = 1`.

    Returns ``{"whitened": ..., "raw": ...}``: the largest absolute difference between the
    two outputs on a batch whitened exactly (centred, then multiplied by the inverse square
    root of its biased covariance) and on the same batch before whitening."""
    g = _gen(seed)
    raw = torch.randn(batch, features, generator=g, dtype=F64) @ torch.randn(
        features, features, generator=g, dtype=F64) + 2.0
    centred = raw - raw.mean(0)
    evals, evecs = torch.linalg.eigh(centred.T @ centred / batch)
    whitened = centred @ evecs @ torch.diag(evals.rsqrt()) @ evecs.T
    v = torch.randn(units, features, generator=g, dtype=F64)
    gain = torch.ones(units, 1, dtype=F64)
    out = {}
    for name, x in (("whitened", whitened), ("raw", raw)):
        bn = LF.batch_norm(x @ v.T, None, None, training=True, eps=1e-12)
        out[name] = (bn - x @ wn.weight_norm(v, gain, dim=0).T).abs().max().item()
    return out


def weight_norm_gradient(lr: float = 0.1, *, units: int = 4, features: int = 8,
                         seed: int = 0) -> dict:
    r"""One weight-normalized layer ``w = g v / |v|`` (rows are units) on a fixed batch and a
    fixed linear loss. Returns ``formula_gap`` (max difference between autograd's
    :math:`\nabla_v L` and :math:`\frac{g}{\lVert v\rVert}M_w\nabla_w L`), ``cosine``
    (largest :math:`|\cos(v, \nabla_v L)|` over units: 0), ``norm_growth`` (largest
    :math:`\lVert v'\rVert^2 - \lVert v\rVert^2 - \eta^2\lVert\nabla_v L\rVert^2` after
    one SGD step with rate ``lr``: 0) and ``grad_ratio`` (:math:`\lVert\nabla_v L\rVert`
    at ``v`` over that at ``10 v``: 10, the function being unchanged)."""
    g = _gen(seed)
    x = torch.randn(32, features, generator=g, dtype=F64)
    target = torch.randn(32, units, generator=g, dtype=F64)
    v = torch.randn(units, features, generator=g, dtype=F64)
    gain = torch.rand(units, 1, generator=g, dtype=F64) + 0.5

    def grad_v(vv):
        vv = vv.clone().requires_grad_(True)
        ((x @ wn.weight_norm(vv, gain, dim=0).T) * target).sum().backward()
        return vv.grad

    w = wn.weight_norm(v, gain, dim=0).requires_grad_(True)
    ((x @ w.T) * target).sum().backward()
    gv = grad_v(v)
    norms = v.norm(dim=1, keepdim=True)
    unit_w = w.detach() / w.detach().norm(dim=1, keepdim=True)
    projected = w.grad - (w.grad * unit_w).sum(1, keepdim=True) * unit_w   # M_w grad_w
    stepped = v - lr * gv
    return {"formula_gap": (gv - gain / norms * projected).abs().max().item(),
            "cosine": ((gv * v).sum(1) / (gv.norm(dim=1) * norms[:, 0])).abs().max().item(),
            "norm_growth": (stepped.norm(dim=1) ** 2 - norms[:, 0] ** 2
                            - lr ** 2 * gv.norm(dim=1) ** 2).abs().max().item(),
            "grad_ratio": (gv.norm() / grad_v(10 * v).norm()).item()}


def preactivation_units(depths=(1, 4, 16, 64), *, width: int = 32, batch: int = 256,
                        seed: int = 0) -> dict:
    r"""He et al.'s original and full pre-activation residual units, fully connected, with
    training-mode BN (no affine) and random weights :math:`\mathcal N(0, 2/\text{width})`.

    Returns ``{"identity_gap": {"original": ..., "pre_activation": ...}}``, the largest
    ``|unit(x) - x|`` with the branch's last weight set to 0 (inputs with negative entries),
    and ``{"stream_std": {depth: ...}}``, the average per-feature standard deviation of the
    pre-activation stream after ``depth`` units, starting from a standardized input."""
    g = _gen(seed)
    x = torch.randn(batch, width, generator=g, dtype=F64)

    def weight():
        return torch.randn(width, width, generator=g, dtype=F64) * (2 / width) ** 0.5

    def bn(t):
        return LF.batch_norm(t, None, None, training=True)

    def original(t, w1, w2):                  # weight, BN, ReLU, weight, BN, add, ReLU
        return torch.relu(t + bn(torch.relu(bn(t @ w1.T)) @ w2.T))

    def pre_activation(t, w1, w2):            # BN, ReLU, weight, BN, ReLU, weight, add
        return t + torch.relu(bn(torch.relu(bn(t)) @ w1.T)) @ w2.T

    w1, zero = weight(), torch.zeros(width, width, dtype=F64)
    gaps = {"original": (original(x, w1, zero) - x).abs().max().item(),
            "pre_activation": (pre_activation(x, w1, zero) - x).abs().max().item()}
    stream, stds, depth = x, {}, 0
    for target in sorted(depths):
        while depth < target:
            stream = pre_activation(stream, weight(), weight())
            depth += 1
        stds[target] = stream.std(0, correction=0).mean().item()
    return {"identity_gap": gaps, "stream_std": stds}
