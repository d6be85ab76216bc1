"""Tests for layernorm_tutorial.lab.rnn.cells: shapes, agreement with torch, gradients,
invariances."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from layernorm_tutorial.lab.ln_vs_bn import per_step_batch_norm as psbn
from layernorm_tutorial.lab.rnn import cells as rnn
from layernorm_tutorial.lab.rnn import experiments

KINDS = sorted(rnn.CELL_KINDS)


def _seq(batch=4, steps=5, features=3, seed=0, dtype=torch.float64):
    g = torch.Generator().manual_seed(seed)
    return torch.randn(batch, steps, features, generator=g, dtype=dtype)


@pytest.mark.parametrize("kind", KINDS)
def test_shapes_of_outputs_and_state(kind):
    torch.manual_seed(0)
    cell = rnn.make_cell(kind, 3, 6)
    out, state = rnn.run_sequence(cell, _seq(dtype=torch.float32))
    assert out.shape == (4, 5, 6)
    if kind.endswith("lstm"):
        h, c = state
        assert h.shape == c.shape == (4, 6)
        assert torch.equal(h, out[:, -1])
    else:
        assert state.shape == (4, 6)
        assert torch.equal(state, out[:, -1])


def test_recurrent_layer_and_classifier_shapes():
    torch.manual_seed(0)
    layer = rnn.RecurrentLayer(rnn.make_cell("ln_lstm", 3, 4))
    out, _ = layer(_seq(dtype=torch.float32))
    assert out.shape == (4, 5, 4)
    model = rnn.SequenceClassifier("ln_rnn", 3, 8, num_classes=10)
    assert model(_seq(dtype=torch.float32)).shape == (4, 10)


def test_elman_cell_matches_torch_rnncell():
    torch.manual_seed(1)
    ours = rnn.ElmanRNNCell(3, 5).double()
    ref = torch.nn.RNNCell(3, 5).double()
    with torch.no_grad():
        ref.weight_ih.copy_(ours.weight_xh)
        ref.weight_hh.copy_(ours.weight_hh)
        ref.bias_ih.copy_(ours.bias)
        ref.bias_hh.zero_()
    x = _seq()
    h = torch.zeros(4, 5, dtype=torch.float64)
    out, _ = rnn.run_sequence(ours, x)
    for t in range(x.shape[1]):
        h = ref(x[:, t], h)
        torch.testing.assert_close(out[:, t], h)


def test_lstm_cell_matches_torch_lstmcell():
    torch.manual_seed(2)
    ours = rnn.LSTMCell(3, 5).double()
    ref = torch.nn.LSTMCell(3, 5).double()
    with torch.no_grad():
        ref.weight_ih.copy_(ours.weight_ih)
        ref.weight_hh.copy_(ours.weight_hh)
        ref.bias_ih.copy_(ours.bias)
        ref.bias_hh.zero_()
    x = _seq()
    state = (torch.zeros(4, 5, dtype=torch.float64), torch.zeros(4, 5, dtype=torch.float64))
    out, (h_last, c_last) = rnn.run_sequence(ours, x)
    for t in range(x.shape[1]):
        state = ref(x[:, t], state)
        torch.testing.assert_close(out[:, t], state[0])
    torch.testing.assert_close(c_last, state[1])


def test_layer_norm_summed_inputs_matches_torch_layer_norm():
    g = torch.Generator().manual_seed(3)
    a = torch.randn(7, 11, generator=g, dtype=torch.float64) * 5 + 2
    gain = torch.randn(11, generator=g, dtype=torch.float64)
    bias = torch.randn(11, generator=g, dtype=torch.float64)
    got = rnn.layer_norm_summed_inputs(a, gain, bias, eps=1e-5)
    torch.testing.assert_close(got, TF.layer_norm(a, (11,), gain, bias, eps=1e-5))


def test_ln_rnn_cell_follows_the_paper_formula_step_by_step():
    torch.manual_seed(4)
    cell = rnn.LayerNormElmanRNNCell(3, 6, eps=0.0).double()  # the paper has no eps
    with torch.no_grad():
        cell.weight.uniform_(0.5, 1.5)
        cell.bias.uniform_(-0.5, 0.5)
    x = _seq(steps=3)
    out, _ = rnn.run_sequence(cell, x)
    h = torch.zeros(4, 6, dtype=torch.float64)
    for t in range(3):
        a = cell.weight_hh @ h.T + cell.weight_xh @ x[:, t].T  # (H, B), paper's column form
        mu = a.mean(0)
        sigma = a.std(0, unbiased=False)
        h = torch.tanh(cell.weight[:, None] / sigma * (a - mu) + cell.bias[:, None]).T
        torch.testing.assert_close(out[:, t], h)


@pytest.mark.parametrize("kind", KINDS)
def test_gradients_match_float64_finite_differences(kind):
    torch.manual_seed(5)
    layer = rnn.RecurrentLayer(rnn.make_cell(kind, 2, 3)).double()
    names = [n for n, p in layer.named_parameters() if p.requires_grad]
    params = tuple(layer.get_parameter(n).detach().clone().requires_grad_(True) for n in names)
    x = _seq(batch=3, steps=3, features=2).requires_grad_(True)

    def outputs(x, *ps):
        return torch.func.functional_call(layer, dict(zip(names, ps, strict=True)), (x,))[0]

    assert torch.autograd.gradcheck(outputs, (x, *params))


def test_backward_with_random_upstream_gradient_matches_manual_chain():
    # d<h_T, v>/d x_0 through LN cell: compare autograd with a finite-difference directional
    # derivative, using a random upstream vector v.
    torch.manual_seed(6)
    cell = rnn.LayerNormElmanRNNCell(3, 5).double()
    x = _seq(steps=6).requires_grad_(True)
    v = torch.randn(4, 6, 5, dtype=torch.float64)
    (rnn.run_sequence(cell, x)[0] * v).sum().backward()
    d = torch.randn_like(x)
    h = 1e-6
    with torch.no_grad():
        plus = (rnn.run_sequence(cell, x + h * d)[0] * v).sum()
        minus = (rnn.run_sequence(cell, x - h * d)[0] * v).sum()
    torch.testing.assert_close((x.grad * d).sum(), (plus - minus) / (2 * h), rtol=1e-6,
                               atol=1e-8)


@pytest.mark.parametrize("c", [1e-3, 0.5, 7.0, 1e3])
def test_ln_rnn_cell_invariant_to_rescaling_summed_inputs(c):
    torch.manual_seed(7)
    cell = rnn.LayerNormElmanRNNCell(3, 6, eps=0.0).double()
    x = _seq(steps=8)
    before, _ = rnn.run_sequence(cell, x)
    with torch.no_grad():
        cell.weight_hh.mul_(c)
        cell.weight_xh.mul_(c)
    after, _ = rnn.run_sequence(cell, x)
    torch.testing.assert_close(after, before)


def test_plain_rnn_cell_is_not_invariant_to_rescaling():
    torch.manual_seed(7)
    cell = rnn.ElmanRNNCell(3, 6).double()
    x = _seq(steps=8)
    before, _ = rnn.run_sequence(cell, x)
    with torch.no_grad():
        cell.weight_hh.mul_(3.0)
        cell.weight_xh.mul_(3.0)
    after, _ = rnn.run_sequence(cell, x)
    assert (after - before).abs().max() > 1e-2


@pytest.mark.parametrize("which", ["weight_hh", "weight_ih"])
def test_ln_lstm_invariant_to_rescaling_each_summed_input_separately(which):
    # Separate LNs on W_h h and W_x x make the cell invariant to scaling either one alone.
    torch.manual_seed(8)
    cell = rnn.LayerNormLSTMCell(3, 5, eps=1e-12).double()  # h_0 = 0: eps > 0
    x = _seq(steps=6)
    before, _ = rnn.run_sequence(cell, x)
    with torch.no_grad():
        getattr(cell, which).mul_(25.0)
    after, _ = rnn.run_sequence(cell, x)
    torch.testing.assert_close(after, before)


def test_ln_lstm_normalizes_the_cell_state_but_carries_it_unnormalized():
    torch.manual_seed(9)
    cell = rnn.LayerNormLSTMCell(3, 5).double()
    x = _seq(steps=4)
    _, (h, c) = rnn.run_sequence(cell, x)
    # h_T = s(o) * tanh(LN(c_T)); c_T itself is not normalized (nonzero row mean in general)
    assert c.mean(dim=1).abs().max() > 1e-3
    x_last = x[:, -1]
    _, (h_prev, c_prev) = rnn.run_sequence(cell, x[:, :-1])
    gates = cell.gate_inputs(x_last, h_prev, 3)
    i, f, g, o = gates.chunk(4, dim=1)
    c_expected = torch.sigmoid(f) * c_prev + torch.sigmoid(i) * torch.tanh(g)
    torch.testing.assert_close(c, c_expected)
    torch.testing.assert_close(h, torch.sigmoid(o) * torch.tanh(TF.layer_norm(c, (5,))))


def test_per_step_batch_norm_keeps_separate_statistics_per_step():
    torch.manual_seed(10)
    bn = psbn.PerStepBatchNorm(4, max_steps=5, momentum=1.0)
    a0 = torch.randn(16, 4)
    a1 = torch.randn(16, 4) * 3 + 2
    out0 = bn(a0, 0)
    bn(a1, 1)
    torch.testing.assert_close(out0, TF.batch_norm(a0, None, None, training=True))
    torch.testing.assert_close(bn.running_mean[1], a1.mean(0))
    torch.testing.assert_close(bn.running_var[1], a1.var(0, unbiased=True))
    assert int(bn.steps_seen) == 2
    bn.eval()
    torch.testing.assert_close(bn(a1, 1), TF.batch_norm(a1, a1.mean(0), a1.var(0), training=False))


def test_batch_norm_rnn_fails_clearly_on_a_test_sequence_longer_than_training():
    torch.manual_seed(11)
    cell = rnn.BatchNormElmanRNNCell(3, 5)
    rnn.run_sequence(cell, _seq(batch=8, steps=4, dtype=torch.float32))
    cell.eval()
    rnn.run_sequence(cell, _seq(batch=2, steps=4, dtype=torch.float32))  # fine up to 4
    with pytest.raises(psbn.UnseenTimeStepError, match="time step 4"):
        rnn.run_sequence(cell, _seq(batch=2, steps=6, dtype=torch.float32))
    cell.norm.on_unseen_step = "reuse_last"
    out, _ = rnn.run_sequence(cell, _seq(batch=2, steps=6, dtype=torch.float32))
    assert torch.isfinite(out).all()


def test_batch_norm_lstm_fails_on_longer_sequence_and_ln_lstm_does_not():
    torch.manual_seed(12)
    bn_cell, ln_cell = rnn.BatchNormLSTMCell(3, 5), rnn.LayerNormLSTMCell(3, 5)
    rnn.run_sequence(bn_cell, _seq(batch=8, steps=3, dtype=torch.float32))
    bn_cell.eval()
    ln_cell.eval()
    long = _seq(batch=2, steps=9, dtype=torch.float32)
    with pytest.raises(psbn.UnseenTimeStepError):
        rnn.run_sequence(bn_cell, long)
    assert rnn.run_sequence(ln_cell, long)[0].shape == (2, 9, 5)


def test_bad_arguments_raise_clear_errors():
    with pytest.raises(ValueError, match="kind"):
        rnn.make_cell("gru", 3, 4)
    with pytest.raises(ValueError, match="nonlinearity"):
        rnn.ElmanRNNCell(3, 4, nonlinearity="sigmoidal")
    with pytest.raises(ValueError, match="hidden_size"):
        rnn.ElmanRNNCell(3, 0)
    with pytest.raises(ValueError, match="x must have shape"):
        rnn.run_sequence(rnn.ElmanRNNCell(3, 4), torch.randn(2, 3))
    with pytest.raises(ValueError, match="x_t must have shape"):
        rnn.ElmanRNNCell(3, 4)(torch.randn(2, 5))
    with pytest.raises(ValueError, match="on_unseen_step"):
        psbn.PerStepBatchNorm(4, on_unseen_step="guess")
    with pytest.raises(ValueError, match="more than 1 sample"):
        rnn.run_sequence(rnn.BatchNormElmanRNNCell(3, 4), torch.randn(1, 2, 3))


@pytest.mark.parametrize("kind", KINDS)
def test_sizes_follow_the_package_integer_rule(kind):
    # the library's one rule (_validation.as_int): NumPy integers and 0-d integer tensors
    # are ints; bools and floats are not (TypeError); a size below 1 is a ValueError
    cell = rnn.make_cell(kind, np.int64(3), torch.tensor(4))
    assert (cell.input_size, cell.hidden_size) == (3, 4)
    assert type(cell.input_size) is int and type(cell.hidden_size) is int
    assert rnn.run_sequence(cell, _seq(features=3, dtype=torch.float32))[0].shape == (4, 5, 4)
    for bad in (True, 4.0, "4"):
        with pytest.raises(TypeError, match="hidden_size must be an int"):
            rnn.make_cell(kind, 3, bad)
    with pytest.raises(TypeError, match="input_size must be an int"):
        rnn.make_cell(kind, 3.0, 4)
    with pytest.raises(ValueError, match="input_size must be a positive int, got -1"):
        rnn.make_cell(kind, -1, 4)


# ---- experiment helpers used by the book (tiny budgets) ----

def test_unrolled_dynamics_plain_linear_rnn_shrinks_geometrically():
    out = experiments.unrolled_dynamics(False, 0.5, steps=30, hidden_size=32,
                                        nonlinearity="identity")
    rms = out["state_rms"]
    assert rms.shape == out["grad_norm"].shape == out["saturation"].shape == (30,)
    assert rms[-1] < 1e-6 * rms[0]
    ratio = (rms[-1] / rms[9]) ** (1 / 20)
    assert 0.3 < ratio < 0.7  # close to the spectral radius 0.5


def test_unrolled_dynamics_ln_impulse_response_ignores_recurrent_scale():
    small = experiments.unrolled_dynamics(True, 0.5, steps=25, hidden_size=16)
    large = experiments.unrolled_dynamics(True, 3.0, steps=25, hidden_size=16)
    # exact up to eps = 1e-5 inside the square root
    np.testing.assert_allclose(small["state_rms"], large["state_rms"], rtol=1e-3)
    np.testing.assert_allclose(small["grad_norm"], large["grad_norm"], rtol=1e-2)
    plain_small = experiments.unrolled_dynamics(False, 0.5, steps=25, hidden_size=16)
    assert abs(plain_small["state_rms"][-1] - small["state_rms"][-1]) > 0.1


def test_unrolled_dynamics_rejects_unknown_input_mode():
    with pytest.raises(ValueError, match="inputs"):
        experiments.unrolled_dynamics(True, 1.0, steps=3, inputs="zeros")


def test_normalized_input_spread_of_ln_cell_is_one_and_bn_reuse_last_drifts():
    torch.manual_seed(13)
    ln_cell = rnn.LayerNormElmanRNNCell(4, 16)
    x = experiments.random_walk_sequences(64, 30, seed=3)
    spread = experiments.normalized_input_spread(ln_cell, x)
    assert spread.shape == (30,)
    torch.testing.assert_close(spread, torch.ones(30), rtol=2e-2, atol=2e-2)
    bn_cell = rnn.BatchNormElmanRNNCell(4, 16, on_unseen_step="reuse_last", momentum=0.5)
    with torch.no_grad():
        for s in range(10):
            rnn.run_sequence(bn_cell, experiments.random_walk_sequences(64, 5, seed=s))
    bn_cell.eval()
    bn_spread = experiments.normalized_input_spread(bn_cell, x)
    assert bn_spread[-1] > 1.3 * bn_spread[4]  # inputs kept growing after step 5


def test_digit_sequences_and_a_tiny_training_run_are_deterministic():
    x_tr, y_tr, x_te, y_te = experiments.load_digit_sequences()
    assert x_tr.shape[1:] == (8, 8) and len(x_tr) + len(x_te) == 1797
    assert 0.0 <= float(x_tr.min()) and float(x_tr.max()) <= 1.0
    small = (x_tr[:96], y_tr[:96], x_te[:50], y_te[:50])
    first = experiments.train_sequence_classifier("ln_rnn", small, hidden_size=8, epochs=2,
                                          batch_size=32, seed=1)
    second = experiments.train_sequence_classifier("ln_rnn", small, hidden_size=8, epochs=2,
                                           batch_size=32, seed=1)
    assert first == second
    assert len(first["train_loss"]) == len(first["test_accuracy"]) == 2
    assert first["train_loss"][1] < first["train_loss"][0]
