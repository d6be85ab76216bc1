"""The drill checkers never tell a reader the wrong thing (issue 12, items 9-11), and name
the common slips (issue 41, item 5: the RMSNorm and LayerNorm drills).

* Every mistake in the checkers' tables, fed to its checker as a reader's answer, is
  diagnosed with its own words (and no other mistake's).
* Correct answers written differently (float32, ``torch.var_mean``, einsum, ``[out, cache]``
  as a list, the torch form of the GroupNorm exercise) pass.
* A mistake is named only when it explains the output beyond doubt: a float32 solution is not
  blamed for "unbiased variance" (the old checker did that on the tiny-variance case), and an
  output off by float32-sized noise is told that precision is the issue.
"""

import numpy as np
import pytest
import torch

from layernorm_tutorial import numpy_ref
from layernorm_tutorial.lab.interview import norm_drills
from layernorm_tutorial.lab.interview import rms_norm_exercises as rms_drill
from layernorm_tutorial.lab.ln_vs_bn import exercises as bn_drill
from layernorm_tutorial.lab.norm_family import group_norm_exercises as gn_drill
from layernorm_tutorial.lab.principles import exercises as ln_drill

RNG = np.random.default_rng(0)


# --------------------------------------------------------------------------- LayerNorm
def _correct_backward(dout, cache):
    x, gamma, eps = cache
    mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
    rstd = 1 / np.sqrt(var + eps)
    xhat = (x - mean) * rstd
    g = dout * gamma
    lead = tuple(range(x.ndim - 1))
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (dout * xhat).sum(lead), dout.sum(lead)


def _forward_with_cache(x, gamma, beta, eps):
    return numpy_ref.layer_norm_forward(x, gamma, beta, eps)[0], (x, gamma, eps)


def _all_forward_mistakes():
    x3 = RNG.standard_normal((2, 3, 5))
    messages = list(ln_drill._forward_mistakes(x3, np.ones(5), np.zeros(5), 1e-2))
    return messages


@pytest.mark.parametrize("message", _all_forward_mistakes())
def test_every_layer_norm_forward_mistake_is_named(message):
    def reader(x, gamma, beta, eps):
        correct = numpy_ref.layer_norm_forward(x, gamma, beta, eps)[0]
        with np.errstate(divide="ignore", invalid="ignore"):
            return ln_drill._forward_mistakes(x, gamma, beta, eps).get(message, correct), None

    result = ln_drill.check_layer_norm(reader)
    assert not result.passed
    assert message in result.message, result.message


def _all_backward_mistakes():
    x, gamma, dout = RNG.standard_normal((4, 3)), np.ones(3), RNG.standard_normal((4, 3))
    table = ln_drill._backward_mistakes(x, gamma, 1e-5, dout)
    return [(label, message) for label, mistakes in table.items() for message in mistakes]


@pytest.mark.parametrize(("label", "message"), _all_backward_mistakes())
def test_every_layer_norm_backward_mistake_is_named(label, message):
    def reader(dout, cache):
        x, gamma, eps = cache
        grads = dict(zip(("dx", "dgamma", "dbeta"), _correct_backward(dout, cache), strict=True))
        grads[label] = ln_drill._backward_mistakes(x, gamma, eps, dout)[label][message]
        return grads["dx"], grads["dgamma"], grads["dbeta"]

    result = ln_drill.check_layer_norm(_forward_with_cache, reader)
    assert not result.passed
    assert message in result.message, result.message


def _float32_forward(x, gamma, beta, eps):
    x32 = x.astype(np.float32)
    mean, var = x32.mean(-1, keepdims=True), x32.var(-1, keepdims=True)
    xhat = (x32 - mean) / np.sqrt(var + np.float32(eps))
    out = gamma.astype(np.float32) * xhat + beta.astype(np.float32)
    return out, (xhat, np.float32(1) / np.sqrt(var + np.float32(eps)), gamma.astype(np.float32))


def _float32_backward(dout, cache):
    xhat, rstd, gamma = cache
    dout = dout.astype(np.float32)
    g = dout * gamma
    lead = tuple(range(dout.ndim - 1))
    dx = rstd * (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True))
    return dx, (dout * xhat).sum(lead), dout.sum(lead)


def _var_mean_forward(x, gamma, beta, eps):
    t = torch.as_tensor(x)
    var, mean = torch.var_mean(t, dim=-1, keepdim=True, correction=0)
    out = (t - mean) * torch.rsqrt(var + eps) * torch.as_tensor(gamma) + torch.as_tensor(beta)
    return out.numpy(), (x, gamma, eps)


def _einsum_forward(x, gamma, beta, eps):
    d = x.shape[-1]
    mean = np.einsum("...d->...", x)[..., None] / d
    centred = x - mean
    var = np.einsum("...d,...d->...", centred, centred)[..., None] / d
    return [gamma * centred / np.sqrt(var + eps) + beta, (x, gamma, eps)]  # a list pair


def _einsum_backward(dout, cache):
    return list(_correct_backward(dout, cache))


@pytest.mark.parametrize(("forward", "backward"), [
    (numpy_ref.layer_norm_forward, numpy_ref.layer_norm_backward),
    (_float32_forward, _float32_backward),
    (_var_mean_forward, _correct_backward),
    (_einsum_forward, _einsum_backward),
    (lambda *args: _einsum_forward(*args)[0], None),      # out alone, no backward
], ids=["reference", "float32", "torch.var_mean", "einsum-list-pair", "out-alone"])
def test_correct_layer_norms_written_differently_pass(forward, backward):
    result = ln_drill.check_layer_norm(forward, backward)
    assert result.passed, result.message


def test_float32_solution_is_compared_at_float32_precision_and_never_blamed():
    """The old checker said "variance is unbiased" to this correct float32 solution."""
    result = ln_drill.check_layer_norm(_float32_forward)
    assert result.passed and "float32" in result.message, result.message
    assert "unbiased" not in result.message


def test_float32_sized_noise_in_a_float64_output_is_reported_as_precision():
    def noisy(x, gamma, beta, eps):
        out = numpy_ref.layer_norm_forward(x, gamma, beta, eps)[0]
        return out * (1 + 1e-5 * np.sin(np.arange(out.size)).reshape(out.shape)), None

    result = ln_drill.check_layer_norm(noisy)
    assert not result.passed
    assert "float32 precision" in result.message, result.message
    assert "unbiased" not in result.message and "eps" not in result.message.split("(")[0]


@pytest.mark.parametrize(("fixed", "words"), [
    (1e-6, "eps argument is ignored (eps=1e-06 is hard-coded)"),
    (1e-5, "eps argument is ignored (eps=1e-05 is hard-coded)"),
    (0.0, "eps is missing"),
])
def test_hard_coded_or_missing_eps_is_named_as_such(fixed, words):
    with np.errstate(divide="ignore", invalid="ignore"):
        result = ln_drill.check_layer_norm(
            lambda x, g, b, eps: numpy_ref.layer_norm_forward(x, g, b, fixed))
    assert not result.passed and words in result.message, result.message


def test_a_mistake_within_the_tolerance_of_the_correct_answer_is_not_named():
    """On a case where the mistake and the right answer coincide, matching it proves nothing."""
    x, gamma, beta = RNG.standard_normal((3, 4)), np.ones(4), np.zeros(4)
    expected = numpy_ref.layer_norm_forward(x, gamma, beta, 1e-5)[0]
    close = expected + 1e-9
    assert ln_drill.diagnose([(close, expected, 1e-8, {"a mistake": expected + 2e-9})]) is None
    far = expected + 1.0
    assert ln_drill.diagnose([(far, expected, 1e-8, {"a mistake": far})]) == "a mistake"


# --------------------------------------------------------------------------- GroupNorm
def _all_group_norm_mistakes():
    x = RNG.standard_normal((2, 6, 3, 6))
    return list(gn_drill._mistakes(x, 3, np.ones(6), np.zeros(6), 1e-5, affine=True))


@pytest.mark.parametrize("message", _all_group_norm_mistakes())
def test_every_group_norm_mistake_is_named(message):
    def reader(x, num_groups, gamma, beta, eps):
        correct = gn_drill.group_norm_via_reshape(x, num_groups, gamma, beta, eps)
        return gn_drill._mistakes(x, num_groups, gamma, beta, eps, True).get(message, correct)

    result = gn_drill.check_group_norm(reader)
    assert not result.passed
    assert message in result.message, result.message


@pytest.mark.parametrize("fn", [
    gn_drill.group_norm_via_reshape,
    lambda x, g, gamma, beta, eps: gn_drill.group_norm_via_reshape(
        x.astype(np.float32), g, gamma, beta, eps).astype(np.float32),
    gn_drill.reference_group_norm,                                    # the torch form
    lambda x, g, eps: gn_drill.reference_group_norm(x.float(), g, eps),
    lambda x, g, eps: torch.nn.functional.group_norm(x, g, eps=eps),
], ids=["numpy", "numpy-float32", "torch-form", "torch-form-float32", "torch-group_norm"])
def test_correct_group_norms_written_differently_pass(fn):
    result = gn_drill.check_group_norm(fn)
    assert result.passed, result.message


# --------------------------------------------------------------------------- running stats
def _update_messages():
    old, stat = np.zeros(3), np.ones(3)
    return ([("running_mean", m) for m in bn_drill._update_mistakes("running_mean", old, stat,
                                                                     0.1)] +
            [("running_var", m) for m in bn_drill._update_mistakes("running_var", old, stat,
                                                                    0.1, stat)])


@pytest.mark.parametrize(("label", "message"), _update_messages())
def test_every_running_update_mistake_is_named_in_the_function_form(label, message):
    def reader(running_mean, running_var, batch, momentum, step):
        new = dict(zip(("running_mean", "running_var"), bn_drill.reference_running_update(
            running_mean, running_var, batch, momentum, step), strict=True))
        b = batch.numpy()
        old = (running_mean if label == "running_mean" else running_var).numpy()
        stat = b.mean(0) if label == "running_mean" else b.var(0, ddof=1)
        biased = None if label == "running_mean" else b.var(0)
        m = momentum if momentum is not None else 1 / step
        new[label] = torch.as_tensor(
            bn_drill._update_mistakes(label, old, stat, m, biased)[message])
        return new["running_mean"], new["running_var"]

    result = bn_drill.check_running_statistics(reader)
    assert not result.passed
    assert message in result.message, result.message


def _class_with_update_mistake(label, message):
    class Reader(bn_drill.BatchNormWithRunningStats):
        def forward(self, x, training=True):
            old = {"running_mean": self.running_mean.copy(),
                   "running_var": self.running_var.copy()}
            out = super().forward(x, training)
            if training:
                stat = x.mean(0) if label == "running_mean" else x.var(0, ddof=1)
                biased = None if label == "running_mean" else x.var(0)
                setattr(self, label, bn_drill._update_mistakes(label, old[label], stat,
                                                               self.momentum, biased)[message])
            return out

    return Reader


@pytest.mark.parametrize(("label", "message"), _update_messages())
def test_every_running_update_mistake_is_named_in_the_class_form(label, message):
    result = bn_drill.check_running_statistics(_class_with_update_mistake(label, message))
    assert not result.passed
    assert message in result.message, result.message


def _output_messages():
    x, g, b, rm, rv = RNG.standard_normal((4, 3)), np.ones(3), np.zeros(3), np.zeros(3), \
        np.ones(3)
    return ([("train", m) for m in bn_drill._train_output_mistakes(x, g, b, 1e-5, rm, rv)] +
            [("eval", m) for m in bn_drill._eval_output_mistakes(x, g, b, 1e-5, rm, rv, 0.1)])


@pytest.mark.parametrize(("mode", "message"), _output_messages())
def test_every_batch_norm_output_mistake_is_named(mode, message):
    class Reader(bn_drill.BatchNormWithRunningStats):
        def forward(self, x, training=True):
            rm, rv = self.running_mean.copy(), self.running_var.copy()
            correct = super().forward(x, training)
            if training and mode == "train":
                table = bn_drill._train_output_mistakes(x, self.gamma, self.beta, self.eps,
                                                        rm, rv)
            elif not training and mode == "eval":
                table = bn_drill._eval_output_mistakes(x, self.gamma, self.beta, self.eps,
                                                       rm, rv, self.momentum)
            else:
                table = {}
            return table.get(message, correct)

    result = bn_drill.check_running_statistics(Reader)
    assert not result.passed
    assert message in result.message, result.message


def test_new_batch_norm_mistakes_written_by_hand_are_named():
    class RunningStd(bn_drill.BatchNormWithRunningStats):
        def forward(self, x, training=True):
            if not training:
                return self.gamma * (x - self.running_mean) / (self.running_var + self.eps) \
                    + self.beta
            m, old_running = self.momentum, self.running_var.copy()
            out = super().forward(x, True)
            self.running_var = (1 - m) * old_running + m * x.std(0, ddof=1)
            return out

    class UpdatesInEval(bn_drill.BatchNormWithRunningStats):
        def forward(self, x, training=True):
            if training or len(x) < 2:
                return super().forward(x, training)
            m = self.momentum
            self.running_mean = (1 - m) * self.running_mean + m * x.mean(0)
            self.running_var = (1 - m) * self.running_var + m * x.var(0, ddof=1)
            return super().forward(x, False)

    assert "running standard deviation" in bn_drill.check_running_statistics(RunningStd).message
    result = bn_drill.check_running_statistics(UpdatesInEval)
    assert "updates the running statistics with this batch before normalizing" in result.message


def test_correct_running_statistics_written_differently_pass():
    class Float32(bn_drill.BatchNormWithRunningStats):
        def forward(self, x, training=True):
            return super().forward(x.astype(np.float32), training).astype(np.float32)

    def float32_update(running_mean, running_var, batch, momentum, step):
        new = bn_drill.reference_running_update(running_mean, running_var, batch, momentum, step)
        return [t.float() for t in new]                                   # a list pair

    def by_torch_module(running_mean, running_var, batch, momentum, step):
        bn = torch.nn.BatchNorm1d(batch.shape[1], momentum=momentum).double()
        bn.running_mean.copy_(running_mean)
        bn.running_var.copy_(running_var)
        bn.num_batches_tracked.fill_(step - 1)
        bn(batch)
        return bn.running_mean, bn.running_var

    for solution in (bn_drill.BatchNormWithRunningStats, Float32,
                     bn_drill.reference_running_update, float32_update, by_torch_module):
        result = bn_drill.check_running_statistics(solution)
        assert result.passed, (solution, result.message)


# --------------------------------------------------------------------------- RMSNorm drill
# Each common slip, written by hand the way a reader writes it (not taken from the checker's
# own table of mistake models), gets its own diagnosis instead of a generic "differs".
def _rms_backward(x, gamma, dout, r):
    xhat, g = x / r, dout * gamma
    lead = tuple(range(x.ndim - 1))
    dx = (g - xhat * (g * xhat).mean(-1, keepdims=True)) / r
    return dx, (dout * xhat).sum(axis=lead)


def _rms(x, eps):
    return np.sqrt((x * x).mean(-1, keepdims=True) + eps)


def _mean_not_mean_square(x, gamma, dout, eps):
    r = np.sqrt(x.mean(axis=-1, keepdims=True) + eps)          # forgot to square
    return (gamma * x / r, *_rms_backward(x, gamma, dout, _rms(x, eps)))


def _hard_coded_axis_1(x, gamma, dout, eps):
    r = np.sqrt((x * x).mean(axis=1, keepdims=True) + eps)     # right for 2-D input only
    return (gamma * x / r, *_rms_backward(x, gamma, dout, _rms(x, eps)))


def _sum_not_mean_in_backward(x, gamma, dout, eps):
    r = _rms(x, eps)
    g = dout * gamma
    dx = g / r - x * (g * x).sum(-1, keepdims=True) / r ** 3   # the 1/H of dr/dx is lost
    return gamma * x / r, dx, (dout * x / r).sum(axis=tuple(range(x.ndim - 1)))


def _factor_two_in_backward(x, gamma, dout, eps):
    r = _rms(x, eps)
    g = dout * gamma
    dr = 2 * x / (x.shape[-1] * r)                              # d(x**2) without the 1/2
    dx = g / r - (g * x).sum(-1, keepdims=True) * dr / r ** 2
    return gamma * x / r, dx, (dout * x / r).sum(axis=tuple(range(x.ndim - 1)))


def _no_keepdims(x, gamma, dout, eps):
    r = np.sqrt((x * x).mean(axis=-1) + eps)                   # (N,) cannot divide (N, H)
    return (gamma * x / r, *_rms_backward(x, gamma, dout, _rms(x, eps)))


def _eps_only_in_forward(x, gamma, dout, eps):
    y = gamma * x / _rms(x, eps)
    with np.errstate(divide="ignore", invalid="ignore"):
        dx, dgamma = _rms_backward(x, gamma, dout, _rms(x, 0.0))
    return y, dx, dgamma


def _dgamma_with_x(x, gamma, dout, eps):
    y, dx, _ = rms_drill.rms_norm_reference(x, gamma, dout, eps)
    return y, dx, (dout * x).sum(axis=tuple(range(x.ndim - 1)))


@pytest.mark.parametrize(("reader", "words"), [
    (_mean_not_mean_square, "takes the mean of x, not of its squares"),
    (_hard_coded_axis_1, "hard-coded axis=1"),
    (_sum_not_mean_in_backward, "a missing 1/H"),
    (_factor_two_in_backward, "factor 2 in the RMS derivative"),
    (_no_keepdims, "keepdims=True"),
    (_eps_only_in_forward, "leaves eps out of r in the backward"),
    (_dgamma_with_x, "dgamma uses x instead of x_hat"),
], ids=["mean-of-x", "axis-1", "sum-for-mean", "factor-2", "no-keepdims-2d", "eps-backward",
        "dgamma-x"])
def test_each_common_rms_norm_slip_gets_its_own_diagnosis(reader, words):
    with np.errstate(divide="ignore", invalid="ignore"):
        result = rms_drill.check_rms_norm(reader)
    assert not result.passed
    assert words in result.message, result.message
    assert "differs from torch" not in result.message, result.message


def test_the_keepdims_hint_shows_on_the_first_two_dimensional_case():
    """The old checker hinted at keepdims only for 3-D inputs, after the 2-D case raised."""
    result = rms_drill.check_rms_norm(_no_keepdims)
    assert "on a (6, 7) batch" in result.message and "broadcast" in result.message
    assert "keepdims=True" in result.message


def _rms_closed_form_r3(x, gamma, dout, eps):
    r = _rms(x, eps)
    g = dout * gamma
    dx = g / r - x * (g * x).sum(-1, keepdims=True) / (x.shape[-1] * r ** 3)
    flat = (dout * x / r).reshape(-1, x.shape[-1])
    return gamma * x / r, dx, flat.sum(0)


def _rms_einsum(x, gamma, dout, eps):
    h = x.shape[-1]
    x2 = x.reshape(-1, h)
    r = np.sqrt(np.einsum("nh,nh->n", x2, x2) / h + eps)[:, None]
    xhat, g = x2 / r, dout.reshape(-1, h) * gamma
    dx = (g - xhat * np.einsum("nh,nh->n", g, xhat)[:, None] / h) / r
    return ((gamma * xhat).reshape(x.shape), dx.reshape(x.shape),
            np.einsum("nh,nh->h", dout.reshape(-1, h), xhat))


def _rms_autograd(x, gamma, dout, eps):
    xt = torch.tensor(x, requires_grad=True)
    gt = torch.tensor(gamma, requires_grad=True)
    y = gt * xt * torch.rsqrt(xt.pow(2).mean(-1, keepdim=True) + eps)
    y.backward(torch.tensor(dout))
    return y.detach(), xt.grad, gt.grad                         # tensors, not arrays


def _rms_float32(x, gamma, dout, eps):
    outs = rms_drill.rms_norm_reference(x.astype(np.float32), gamma.astype(np.float32),
                                        dout.astype(np.float32), np.float32(eps))
    return tuple(np.asarray(o, np.float32) for o in outs)


@pytest.mark.parametrize("reader", [rms_drill.rms_norm_reference, _rms_closed_form_r3,
                                    _rms_einsum, _rms_autograd, _rms_float32],
                         ids=["reference", "r-cubed", "einsum", "autograd", "float32"])
def test_correct_rms_norms_written_differently_still_pass(reader):
    result = rms_drill.check_rms_norm(reader)
    assert result.passed, result.message


# --------------------------------------------------------------------------- LN slips by hand
def _ln_forward(x, gamma, beta, eps):
    return numpy_ref.layer_norm_forward(x, gamma, beta, eps)[0], (x, gamma, eps)


def _ln_backward_with(bad):
    def backward(dout, cache):
        x, gamma, eps = cache
        mean, var = x.mean(-1, keepdims=True), x.var(-1, keepdims=True)
        rstd = 1 / np.sqrt(var + eps)
        xhat, g = (x - mean) * rstd, dout * gamma
        lead = tuple(range(x.ndim - 1))
        return bad(g, xhat, rstd, x.shape[-1]), (dout * xhat).sum(lead), dout.sum(lead)
    return backward


def _ln_no_keepdims(x, gamma, beta, eps):
    mean, var = x.mean(-1), x.var(-1)                           # (N,) against (N, D)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta, None


def _ln_axis_1(x, gamma, beta, eps):
    mean, var = x.mean(1, keepdims=True), x.var(1, keepdims=True)
    return gamma * (x - mean) / np.sqrt(var + eps) + beta, None


@pytest.mark.parametrize(("forward", "backward", "words"), [
    (_ln_forward, _ln_backward_with(
        lambda g, xhat, rstd, d: rstd * (g - g.sum(-1, keepdims=True)
                                         - xhat * (g * xhat).sum(-1, keepdims=True))),
     "a missing 1/D"),
    (_ln_forward, _ln_backward_with(
        lambda g, xhat, rstd, d: rstd * (g - g.mean(-1, keepdims=True)
                                         - 2 * xhat * (g * xhat).mean(-1, keepdims=True))),
     "factor 2 in the variance path"),
    (_ln_no_keepdims, None, "keepdims=True"),
    (_ln_axis_1, None, "use axis=-1, not axis=1"),
], ids=["sum-for-mean", "factor-2", "no-keepdims-2d", "axis-1"])
def test_each_common_layer_norm_slip_gets_its_own_diagnosis(forward, backward, words):
    result = ln_drill.check_layer_norm(forward, backward)
    assert not result.passed
    assert words in result.message, result.message
    assert "differs from" not in result.message, result.message


# --------------------------------------------------------------------------- part 1 drill:
# LayerNorm, BatchNorm (training and evaluation) and GroupNorm, forward and backward
_LN_LABELS = ("y", "dx", "dgamma", "dbeta")
_BN_LABELS = _LN_LABELS + ("running_mean", "running_var")


def _all_norm_drill_mistakes():
    rng = np.random.default_rng(1)
    x3, d3 = rng.standard_normal((2, 3, 5)), rng.standard_normal((2, 3, 5))
    ln = norm_drills._ln_mistakes(x3, np.ones(5), np.zeros(5), d3, 1e-2)
    out = [("layer", label, m) for label, table in ln.items() for m in table]
    x4, d4 = rng.standard_normal((2, 3, 4, 4)), rng.standard_normal((2, 3, 4, 4))
    for training, momentum in ((True, 0.3), (False, 0.1)):
        bn = norm_drills._bn_mistakes(x4, np.ones(3), np.zeros(3), d4, np.zeros(3),
                                      np.ones(3), training, momentum, 1e-2)
        out += [("batch", label, m) for label, table in bn.items() for m in table]
    x6, d6 = rng.standard_normal((2, 6, 3, 3)), rng.standard_normal((2, 6, 3, 3))
    gn = norm_drills._gn_mistakes(x6, 3, np.ones(6), np.zeros(6), d6, 1e-2)
    out += [("group", label, m) for label, table in gn.items() for m in table]
    return sorted(set(out))


def _drill_reader(kind, label, message):
    """A reader that is right everywhere except ``label``, which has the slip ``message``
    wherever that slip applies."""
    reference = {"layer": norm_drills.layer_norm_reference,
                 "batch": norm_drills.batch_norm_reference,
                 "group": norm_drills.group_norm_reference}[kind]
    mistakes = {"layer": norm_drills._ln_mistakes, "batch": norm_drills._bn_mistakes,
                "group": norm_drills._gn_mistakes}[kind]
    labels = _BN_LABELS if kind == "batch" else _LN_LABELS

    def reader(*args):
        outputs = dict(zip(labels, reference(*args), strict=True))
        with np.errstate(divide="ignore", invalid="ignore"):
            table = mistakes(*args)
        outputs[label] = table[label].get(message, outputs[label])
        return tuple(outputs[lb] for lb in labels)

    return reader


@pytest.mark.parametrize(("kind", "label", "message"), _all_norm_drill_mistakes())
def test_every_norm_drill_mistake_is_named(kind, label, message):
    check = {"layer": norm_drills.check_layer_norm, "batch": norm_drills.check_batch_norm,
             "group": norm_drills.check_group_norm}[kind]
    with np.errstate(divide="ignore", invalid="ignore"):
        result = check(_drill_reader(kind, label, message))
    assert not result.passed
    assert message in result.message, result.message


# Each slip the part 1 drill is about, written by hand the way a reader writes it (not taken
# from the checker's tables), gets its own diagnosis instead of a generic "differs".
def _ln_by_hand(x, gamma, beta, dout, eps, *, ddof=0, eps_outside=False, axis=-1,
                keepdims=True, constant_stats=False):
    mean = x.mean(axis=axis, keepdims=keepdims)
    var = x.var(axis=axis, ddof=ddof, keepdims=keepdims)
    std = np.sqrt(var) + eps if eps_outside else np.sqrt(var + eps)
    xhat = (x - mean) / std
    g = dout * gamma
    lead = tuple(range(x.ndim - 1))
    if constant_stats:
        dx = g / std
    else:
        dx = (g - g.mean(-1, keepdims=True) - xhat * (g * xhat).mean(-1, keepdims=True)) / std
    return gamma * xhat + beta, dx, (dout * xhat).sum(lead), dout.sum(lead)


def _bn_by_hand(x, gamma, beta, dout, running_mean, running_var, training, momentum=0.1,
                eps=1e-5, *, axes=None, keepdims=True, biased_running=False,
                running_factor_n=False, batch_stats_in_eval=False, keras_momentum=False,
                train_backward_in_eval=False):
    axes = (0,) + tuple(range(2, x.ndim)) if axes is None else axes
    shape = (1, -1) + (1,) * (x.ndim - 2)
    gb, bb = gamma.reshape(shape), beta.reshape(shape)
    if training or batch_stats_in_eval:
        mean = x.mean(axis=axes, keepdims=keepdims)
        var = x.var(axis=axes, keepdims=keepdims)
    else:
        mean, var = running_mean.reshape(shape), running_var.reshape(shape)
    std = np.sqrt(var + eps)
    xhat = (x - mean) / std
    g = dout * gb
    red = (0,) + tuple(range(2, x.ndim))
    if training or train_backward_in_eval:
        dx = (g - g.mean(red, keepdims=True) - xhat * (g * xhat).mean(red, keepdims=True)) / std
    else:
        dx = g / std
    if training:
        m = x.shape[0] if running_factor_n else x.size // x.shape[1]
        batch_var = x.var(axis=red) * (1 if biased_running else m / (m - 1))
        keep, new = (momentum, 1 - momentum) if keras_momentum else (1 - momentum, momentum)
        running_mean = keep * running_mean + new * x.mean(axis=red)
        running_var = keep * running_var + new * batch_var
    return gb * xhat + bb, dx, (dout * xhat).sum(red), dout.sum(red), running_mean, running_var


def _gn_by_hand(x, num_groups, gamma, beta, dout, eps, *, stride=False, constant_stats=False):
    n, c = x.shape[:2]
    if stride:                                   # channel c in group c % G
        grouped = x.reshape(n, c // num_groups, num_groups, -1).transpose(0, 2, 1, 3)
        grouped = grouped.reshape(n, num_groups, -1)
    else:
        grouped = x.reshape(n, num_groups, -1)
    mean = grouped.mean(-1, keepdims=True)
    std = np.sqrt(grouped.var(-1, keepdims=True) + eps)
    hat = (grouped - mean) / std
    if stride:
        hat = hat.reshape(n, num_groups, c // num_groups, -1).transpose(0, 2, 1, 3)
    xhat = hat.reshape(x.shape)
    shape = (1, c) + (1,) * (x.ndim - 2)
    g = (dout * gamma.reshape(shape)).reshape(n, num_groups, -1)
    hat_g = xhat.reshape(n, num_groups, -1)
    if constant_stats:
        dx = g / std
    else:
        dx = (g - g.mean(-1, keepdims=True)
              - hat_g * (g * hat_g).mean(-1, keepdims=True)) / std
    red = (0,) + tuple(range(2, x.ndim))
    return (gamma.reshape(shape) * xhat + beta.reshape(shape), dx.reshape(x.shape),
            (dout * xhat).sum(red), dout.sum(red))


def _with(fn, **slip):
    return lambda *args: fn(*args, **slip)


@pytest.mark.parametrize(("check", "reader", "words"), [
    ("layer", _with(_ln_by_hand, ddof=1), "the variance is unbiased"),
    ("layer", _with(_ln_by_hand, eps_outside=True), "eps is added outside the square root"),
    ("layer", _with(_ln_by_hand, keepdims=False), "keepdims=True"),
    ("layer", _with(_ln_by_hand, axis=1), "hard-coded axis=1"),
    ("layer", _with(_ln_by_hand, constant_stats=True), "treats the mean and variance as "
                                                       "constants"),
    ("batch", _with(_bn_by_hand, axes=0), "taken over axis 0 only"),
    ("batch", _with(_bn_by_hand, keepdims=False), "keepdims=True"),
    ("batch", _with(_bn_by_hand, biased_running=True), "running_var is updated with the "
                                                       "biased batch variance"),
    ("batch", _with(_bn_by_hand, running_factor_n=True), "uses the batch size N"),
    ("batch", _with(_bn_by_hand, keras_momentum=True), "momentum convention is reversed"),
    ("batch", _with(_bn_by_hand, batch_stats_in_eval=True), "evaluation mode normalizes with "
                                                            "the batch statistics"),
    ("batch", _with(_bn_by_hand, train_backward_in_eval=True), "training formula in "
                                                               "evaluation mode"),
    ("group", _with(_gn_by_hand, stride=True), "grouped by stride"),
    ("group", _with(_gn_by_hand, constant_stats=True), "treats the mean and variance as "
                                                       "constants"),
], ids=["ln-unbiased", "ln-eps-outside", "ln-no-keepdims", "ln-axis-1", "ln-constant-stats",
        "bn-axis-0", "bn-no-keepdims", "bn-biased-running-var", "bn-factor-N",
        "bn-keras-momentum", "bn-eval-batch-stats", "bn-eval-train-backward", "gn-stride",
        "gn-constant-stats"])
def test_each_common_norm_drill_slip_gets_its_own_diagnosis(check, reader, words):
    checker = {"layer": norm_drills.check_layer_norm, "batch": norm_drills.check_batch_norm,
               "group": norm_drills.check_group_norm}[check]
    result = checker(reader)
    assert not result.passed
    assert words in result.message, result.message
    assert "differs from torch" not in result.message, result.message


def test_a_lost_keepdims_in_a_batch_norm_of_a_feature_map_gets_the_broadcast_hint():
    result = norm_drills.check_batch_norm(
        _with(_bn_by_hand, keepdims=False))
    assert "(4, 3, 5, 6) feature map, training" in result.message
    assert "broadcast" in result.message, result.message


def _norms_by_autograd(kind):
    """Correct solutions that let torch's autograd do the backward (tensors returned)."""
    def layer(x, gamma, beta, dout, eps):
        xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
        mean = xt.mean(-1, keepdim=True)
        var = ((xt - mean) ** 2).mean(-1, keepdim=True)
        y = (xt - mean) * torch.rsqrt(var + eps) * gt + bt
        y.backward(torch.tensor(dout))
        return y.detach(), xt.grad, gt.grad, bt.grad

    def group(x, num_groups, gamma, beta, dout, eps):
        xt, gt, bt = (torch.tensor(a, requires_grad=True) for a in (x, gamma, beta))
        y = torch.nn.functional.group_norm(xt, num_groups, gt, bt, eps)
        y.backward(torch.tensor(dout))
        return y.detach(), xt.grad, gt.grad, bt.grad

    return {"layer": layer, "group": group}[kind]


def _float32(reference):
    def reader(*args):
        args = [a.astype(np.float32) if isinstance(a, np.ndarray) else a for a in args]
        return tuple(np.asarray(o, np.float32) for o in reference(*args))
    return reader


def _batch_norm_module(x, gamma, beta, dout, running_mean, running_var, training,
                       momentum=0.1, eps=1e-5):
    """A correct solution through torch's own module (its buffers copied in and out)."""
    bn = torch.nn.BatchNorm1d(x.shape[1], eps=eps, momentum=momentum).double()
    with torch.no_grad():
        for name, value in (("weight", gamma), ("bias", beta),
                            ("running_mean", running_mean), ("running_var", running_var)):
            getattr(bn, name).copy_(torch.tensor(value))
    bn.train(training)
    xt = torch.tensor(x, requires_grad=True)
    y = bn(xt.reshape(x.shape[0], x.shape[1], -1)).reshape(x.shape)
    y.backward(torch.tensor(dout))
    return (y.detach(), xt.grad, bn.weight.grad, bn.bias.grad, bn.running_mean.detach(),
            bn.running_var.detach())


@pytest.mark.parametrize(("check", "reader"), [
    ("layer", norm_drills.layer_norm_reference), ("layer", _norms_by_autograd("layer")),
    ("layer", _float32(norm_drills.layer_norm_reference)),
    ("batch", norm_drills.batch_norm_reference), ("batch", _batch_norm_module),
    ("batch", _float32(norm_drills.batch_norm_reference)),
    ("group", norm_drills.group_norm_reference), ("group", _norms_by_autograd("group")),
    ("group", _float32(norm_drills.group_norm_reference)),
], ids=["ln-reference", "ln-autograd", "ln-float32", "bn-reference", "bn-torch-module",
        "bn-float32", "gn-reference", "gn-torch", "gn-float32"])
def test_correct_norm_drills_written_differently_pass(check, reader):
    checker = {"layer": norm_drills.check_layer_norm, "batch": norm_drills.check_batch_norm,
               "group": norm_drills.check_group_norm}[check]
    result = checker(reader)
    assert result.passed, result.message


def test_the_norm_drill_references_match_torch_beyond_the_checker_cases():
    """GroupNorm with G = C is InstanceNorm; BatchNorm on (N, C, L) and (N, C, D, H, W)."""
    rng = np.random.default_rng(5)
    x, dout = rng.standard_normal((3, 4, 2, 3, 2)), rng.standard_normal((3, 4, 2, 3, 2))
    gamma, beta = rng.uniform(0.5, 2, 4), rng.standard_normal(4)
    y, dx, dgamma, dbeta = norm_drills.group_norm_reference(x, 4, gamma, beta, dout, 1e-5)
    xt = torch.tensor(x, requires_grad=True)
    yt = torch.nn.functional.instance_norm(xt, weight=torch.tensor(gamma),
                                           bias=torch.tensor(beta), eps=1e-5)
    yt.backward(torch.tensor(dout))
    np.testing.assert_allclose(y, yt.detach().numpy(), rtol=1e-10, atol=1e-12)
    np.testing.assert_allclose(dx, xt.grad.numpy(), rtol=1e-10, atol=1e-12)
    rm, rv = np.zeros(4), np.ones(4)
    out = norm_drills.batch_norm_reference(x, gamma, beta, dout, rm, rv, True, 0.2)
    expected = _batch_norm_module(x, gamma, beta, dout, rm, rv, True, 0.2)
    for got, want in zip(out, expected, strict=True):
        np.testing.assert_allclose(got, want.numpy(), rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="must divide"):
        norm_drills.group_norm_reference(x, 3, gamma, beta, dout)


@pytest.mark.parametrize("check", [norm_drills.check_layer_norm, norm_drills.check_batch_norm,
                                   norm_drills.check_group_norm],
                         ids=["layer", "batch", "group"])
@pytest.mark.parametrize(("returned", "words"), [
    (None, "returned None: did you forget `return`?"),
    ("abc", "return the tuple"),
    ((np.zeros(3),) * 6, None),
])
def test_norm_drill_checkers_answer_any_return_value_with_one_sentence(check, returned,
                                                                       words):
    def reader(*args):
        return returned

    result = check(reader)
    assert not result.passed
    assert "\n" not in result.message
    if words is not None:
        assert words in result.message, result.message
    else:            # a tuple of the wrong length or of wrongly shaped arrays
        assert "return the tuple" in result.message or "shape" in result.message, \
            result.message
