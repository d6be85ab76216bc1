"""The RNN chapter's checkers accept the reference solutions and diagnose typical mistakes."""

import torch

from layernorm_tutorial.lab.rnn import cells as rnn
from layernorm_tutorial.lab.rnn import exercises as ex


def test_ln_rnn_checker_accepts_reference():
    result = ex.check_ln_rnn_step(ex.ln_rnn_step_reference)
    assert result.passed, result.message


def _ln_rnn_variant(unbiased=False, eps_outside=False, over_batch=False, bias_inside=False):
    def step(x, h, w_hh, w_xh, gain, bias, eps):
        a = h @ w_hh.T + x @ w_xh.T
        if bias_inside:
            a = a + bias
        dim = 0 if over_batch else -1
        mu = a.mean(dim, keepdim=True)
        var = a.var(dim, unbiased=unbiased, keepdim=True)
        sigma = var.sqrt() + eps if eps_outside else torch.sqrt(var + eps)
        return torch.tanh(gain * (a - mu) / sigma + (0 if bias_inside else bias))
    return step


def test_ln_rnn_checker_names_the_mistake():
    cases = {"unbiased": dict(unbiased=True),
             "outside the square root": dict(eps_outside=True),
             "over the batch": dict(over_batch=True),
             "bias is added before": dict(bias_inside=True)}
    for phrase, kwargs in cases.items():
        result = ex.check_ln_rnn_step(_ln_rnn_variant(**kwargs))
        assert not result.passed
        assert phrase in result.message, (phrase, result.message)


def test_ln_rnn_checker_reports_exceptions_and_shapes():
    def broken(*args):
        raise RuntimeError("boom")
    assert "RuntimeError" in ex.check_ln_rnn_step(broken).message
    assert "shape" in ex.check_ln_rnn_step(lambda x, h, *rest: h[:, :2]).message


def test_ln_lstm_checker_accepts_reference():
    result = ex.check_ln_lstm_step(ex.ln_lstm_step_reference)
    assert result.passed, result.message


def _ln_lstm_variant(joint=False, carry_normalized=False, no_cell_norm=False):
    def step(x, h, c, p, eps):
        def ln(a, name):
            return rnn.layer_norm_summed_inputs(a, p[name + "_weight"], p[name + "_bias"], eps)
        if joint:
            gates = ln(h @ p["weight_hh"].T + x @ p["weight_ih"].T, "ln_hh") + p["bias"]
        else:
            gates = (ln(h @ p["weight_hh"].T, "ln_hh") + ln(x @ p["weight_ih"].T, "ln_ih")
                     + p["bias"])
        i, f, g, o = gates.chunk(4, dim=-1)
        c_t = torch.sigmoid(f) * c + torch.sigmoid(i) * torch.tanh(g)
        c_n = c_t if no_cell_norm else ln(c_t, "ln_cell")
        h_t = torch.sigmoid(o) * torch.tanh(c_n)
        return h_t, (c_n if carry_normalized else c_t)
    return step


def test_ln_lstm_checker_names_the_mistake():
    cases = {"separate LNs": dict(joint=True), "carries the raw c_t": dict(carry_normalized=True),
             "tanh(LN(c_t))": dict(no_cell_norm=True)}
    for phrase, kwargs in cases.items():
        result = ex.check_ln_lstm_step(_ln_lstm_variant(**kwargs))
        assert not result.passed
        assert phrase in result.message, (phrase, result.message)
    assert "pair" in ex.check_ln_lstm_step(lambda x, h, c, p, eps: h).message
