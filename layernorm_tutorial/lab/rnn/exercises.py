"""Checkers for the exercises of "Layer normalization in recurrent networks".

``check_ln_rnn_step(step)``
    ``step(x_t, h_prev, weight_hh, weight_xh, gain, bias, eps) -> h_t``: one step of the
    LN-RNN of Ba et al. (2016), tanh nonlinearity, torch tensors ``x_t (B, I)``,
    ``h_prev (B, H)``, ``weight_hh (H, H)``, ``weight_xh (H, I)``, ``gain, bias (H,)``.
``check_ln_lstm_step(step)``
    ``step(x_t, h_prev, c_prev, params, eps) -> (h_t, c_t)``: one step of the paper's LN-LSTM;
    ``params`` is the ``dict(LayerNormLSTMCell(...).named_parameters())`` of a cell (gate
    order i, f, g, o).

Both compare with :mod:`layernorm_tutorial.lab.rnn.cells` in float64 and name the likely mistake.
The reference solutions are :func:`ln_rnn_step_reference` and :func:`ln_lstm_step_reference`.
"""

from __future__ import annotations

import torch

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common.checking import (
    CheckResult,
    allclose,
    checker,
    reader_array,
    reader_tuple,
)
from layernorm_tutorial.lab.rnn import cells as rnn

__all__ = [
    "check_ln_lstm_step",
    "check_ln_rnn_step",
    "ln_lstm_step_reference",
    "ln_rnn_step_reference",
]

_F64 = torch.float64


def ln_rnn_step_reference(x_t, h_prev, weight_hh, weight_xh, gain, bias, eps=1e-5):
    """``h_t = tanh(g / sigma_t * (a_t - mu_t) + b)`` with ``a_t = W_hh h_{t-1} + W_xh x_t``."""
    a = h_prev @ weight_hh.T + x_t @ weight_xh.T
    mu = a.mean(dim=-1, keepdim=True)
    sigma = torch.sqrt(((a - mu) ** 2).mean(dim=-1, keepdim=True) + eps)
    return torch.tanh(gain / sigma * (a - mu) + bias)


def ln_lstm_step_reference(x_t, h_prev, c_prev, params, eps=1e-5):
    """The paper's LN-LSTM step: separate LNs on ``W_h h`` and ``W_x x``, LN on ``c_t``."""
    def ln(a, name):
        return rnn.layer_norm_summed_inputs(a, params[name + "_weight"], params[name + "_bias"],
                                            eps)

    gates = (ln(h_prev @ params["weight_hh"].T, "ln_hh") + ln(x_t @ params["weight_ih"].T, "ln_ih")
             + params["bias"])
    i, f, g, o = gates.chunk(4, dim=-1)
    c_t = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    h_t = torch.sigmoid(o) * torch.tanh(ln(c_t, "ln_cell"))
    return h_t, c_t


def _call(step, *args):
    try:
        return step(*args), None
    except Exception as error:  # the reader's code may raise anything
        return None, f"raised {type(error).__name__}: {error}"


def _rnn_case(seed: int, batch: int = 5, inputs: int = 3, hidden: int = 8, scale: float = 1.0):
    g = torch.Generator().manual_seed(seed)

    def randn(*shape):
        return torch.randn(*shape, generator=g, dtype=_F64)

    return (randn(batch, inputs) * scale, torch.tanh(randn(batch, hidden)),
            randn(hidden, hidden) * scale / hidden**0.5, randn(hidden, inputs) * scale,
            1 + 0.3 * randn(hidden), 0.3 * randn(hidden))


def _diagnose_rnn(out, x, h, w_hh, w_xh, gain, bias, eps):
    a = h @ w_hh.T + x @ w_xh.T
    mu = a.mean(-1, keepdim=True)
    var = ((a - mu) ** 2).mean(-1, keepdim=True)
    var_unbiased = a.var(-1, unbiased=True, keepdim=True)
    mu_batch = a.mean(0, keepdim=True)
    var_batch = ((a - mu_batch) ** 2).mean(0, keepdim=True)
    candidates = {
        "the variance is unbiased: divide by H, not H - 1":
            torch.tanh(gain * (a - mu) / torch.sqrt(var_unbiased + eps) + bias),
        "eps is outside the square root: use sqrt(var + eps)":
            torch.tanh(gain * (a - mu) / (var.sqrt() + eps) + bias),
        "the statistics are taken over the batch (that is BatchNorm): LN uses the H summed "
        "inputs of one sample at one step":
            torch.tanh(gain * (a - mu_batch) / torch.sqrt(var_batch + eps) + bias),
        "the summed inputs are not centered: subtract mu_t":
            torch.tanh(gain * a / torch.sqrt(var + eps) + bias),
        "tanh is missing: h_t = tanh(LN(a_t))": gain * (a - mu) / torch.sqrt(var + eps) + bias,
        "the bias is added before normalizing, so LN removes it; add b after the gain":
            torch.tanh(gain * (a + bias - (a + bias).mean(-1, keepdim=True))
                       / torch.sqrt(((a + bias - (a + bias).mean(-1, keepdim=True)) ** 2)
                                    .mean(-1, keepdim=True) + eps)),
        "W_hh and W_xh are transposed or swapped":
            ln_rnn_step_reference(x, h, w_hh.T, w_xh, gain, bias, eps),
    }
    for hint, wrong in candidates.items():
        if wrong.shape == out.shape and allclose(out, wrong, rtol=1e-6, atol=1e-9):
            return hint
    return "the values differ from LayerNormElmanRNNCell"


@checker(returns="h_t, a tensor of shape (batch, hidden)")
def check_ln_rnn_step(step, *, seed: int = 0) -> CheckResult:
    """Check one LN-RNN step against
    :class:`layernorm_tutorial.lab.rnn.cells.LayerNormElmanRNNCell`."""
    eps = 1e-5
    for k, (description, scale) in enumerate([("ordinary inputs", 1.0),
                                              ("weights scaled by 100", 100.0)]):
        x, h, w_hh, w_xh, gain, bias = _rnn_case(seed + k, scale=scale)
        out, error = _call(step, x, h, w_hh, w_xh, gain, bias, eps)
        if error:
            return CheckResult(False, f"on {description} the step {error}")
        cell = rnn.LayerNormElmanRNNCell(x.shape[1], h.shape[1], eps=eps).double()
        with torch.no_grad():
            for name, value in (("weight_hh", w_hh), ("weight_xh", w_xh), ("weight", gain),
                                ("bias", bias)):
                getattr(cell, name).copy_(value)
            expected, _ = cell(x, h)
        out = torch.as_tensor(reader_array(out, step, what="h_t"))
        if out.shape != expected.shape:
            return CheckResult(False, f"on {description} h_t has shape {tuple(out.shape)}, "
                                      f"expected {tuple(expected.shape)} (batch, hidden)")
        if not allclose(out, expected, rtol=1e-6, atol=1e-9):
            return CheckResult(False, f"on {description}: "
                                      + _diagnose_rnn(out, x, h, w_hh, w_xh, gain, bias, eps))
    return CheckResult(True, "the step matches LayerNormElmanRNNCell, also with weights "
                             "scaled by 100 (LN's invariance)")


def _diagnose_lstm(h_out, c_out, x, h, c, p, eps):
    def ln(a, name):
        return rnn.layer_norm_summed_inputs(a, p[name + "_weight"], p[name + "_bias"], eps)

    _, c_ref = ln_lstm_step_reference(x, h, c, p, eps)
    joint = ln(h @ p["weight_hh"].T + x @ p["weight_ih"].T, "ln_hh") + p["bias"]
    i, f, g, o = joint.chunk(4, dim=-1)
    c_joint = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
    if allclose(c_out, c_joint, rtol=1e-6, atol=1e-9):
        return ("the two summed inputs are normalized together; the paper normalizes "
                "W_h h_{t-1} and W_x x_t with separate LNs, then adds them")
    if allclose(c_out, ln(c_ref, "ln_cell"), rtol=1e-6, atol=1e-9):
        return ("c_t is returned normalized: the paper carries the raw c_t and normalizes "
                "it only inside tanh for h_t (TensorFlow's LN-LSTM cells differ here)")
    if not allclose(c_out, c_ref, rtol=1e-6, atol=1e-9):
        return "c_t differs: c_t = sigmoid(f) * c_{t-1} + sigmoid(i) * tanh(g)"
    gates = ln(h @ p["weight_hh"].T, "ln_hh") + ln(x @ p["weight_ih"].T, "ln_ih") + p["bias"]
    o = gates.chunk(4, dim=-1)[3]
    if allclose(h_out, torch.sigmoid(o) * torch.tanh(c_ref), rtol=1e-6, atol=1e-9):
        return "h_t uses tanh(c_t): the paper uses tanh(LN(c_t)) with its own gain and bias"
    return "h_t differs: h_t = sigmoid(o) * tanh(LN(c_t))"


@checker(returns="the pair (h_t, c_t), each of shape (batch, hidden)")
def check_ln_lstm_step(step, *, seed: int = 0) -> CheckResult:
    """Check one LN-LSTM step against
    :class:`layernorm_tutorial.lab.rnn.cells.LayerNormLSTMCell`."""
    eps = 1e-5
    with seeded(seed):
        cell = rnn.LayerNormLSTMCell(3, 6, eps=eps).double()
    g = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for name, p in cell.named_parameters():
            if name.startswith("ln_"):
                p.add_(0.3 * torch.randn(p.shape, generator=g, dtype=_F64))
    params = {name: p.detach().clone() for name, p in cell.named_parameters()}
    x = torch.randn(5, 3, generator=g, dtype=_F64)
    h = torch.tanh(torch.randn(5, 6, generator=g, dtype=_F64))
    c = torch.randn(5, 6, generator=g, dtype=_F64)
    result, error = _call(step, x, h, c, dict(params), eps)
    if error:
        return CheckResult(False, f"the step {error}")
    result = reader_tuple(result, step, 2, "the pair (h_t, c_t)")
    h_out, c_out = (torch.as_tensor(reader_array(r, step, what=label))
                    for r, label in zip(result, ("h_t", "c_t"), strict=True))
    with torch.no_grad():
        h_ref, (_, c_ref) = cell(x, (h, c))
    if h_out.shape != h_ref.shape or c_out.shape != c_ref.shape:
        return CheckResult(False, f"h_t and c_t must both have shape {tuple(h_ref.shape)}")
    if allclose(h_out, h_ref, rtol=1e-6, atol=1e-9) and allclose(c_out, c_ref, rtol=1e-6,
                                                                  atol=1e-9):
        return CheckResult(True, "h_t and c_t match LayerNormLSTMCell (separate LNs on the "
                                 "two summed inputs, LN on the cell state, raw c_t carried)")
    return CheckResult(False, _diagnose_lstm(h_out, c_out, x, h, c, params, eps))
