"""The warm-up trace records what it says, on the model it says, and leaves global state alone."""

import numpy as np
import pytest
import torch

from layernorm_tutorial.lab.common.transformer import TokenTransformer
from layernorm_tutorial.lab.residual import warmup
from layernorm_tutorial.lab.residual.experiments import reverse_task_batch

SMALL = {"d_model": 8, "nhead": 2, "dim_feedforward": 16, "seq_len": 4, "vocab_size": 5,
         "batch_size": 8, "probe_size": 4}


def test_shapes_and_learning_rate_schedule():
    trace = warmup.early_training_trace(3, norm_first=True, steps=5, lr=0.1, warmup_steps=4,
                                        **SMALL)
    assert trace["grad_norm"].shape == (5, 3) and trace["update_ratio"].shape == (5, 3)
    assert trace["loss"].shape == trace["lr"].shape == trace["output_change"].shape == (5,)
    np.testing.assert_allclose(trace["lr"], [0.025, 0.05, 0.075, 0.1, 0.1])
    assert 0.0 <= trace["accuracy"] <= 1.0
    probed = warmup.early_training_trace(1, norm_first=True, steps=3, probe_steps=2, **SMALL)
    assert (probed["output_change"][:2] > 0).all() and np.isnan(probed["output_change"][2])


def _untrained_gradients(num_layers, norm_first, seed):
    torch.manual_seed(seed)
    model = TokenTransformer(5, 5, 4, num_layers, 8, 2, 16, norm_first=norm_first)
    tokens, targets = reverse_task_batch(8, 4, 5, torch.Generator().manual_seed(seed + 1))
    loss = torch.nn.functional.cross_entropy(model(tokens).reshape(-1, 5), targets.reshape(-1))
    loss.backward()
    return model, float(loss.detach())


def test_first_gradient_is_that_of_the_untrained_model():
    trace = warmup.early_training_trace(2, norm_first=False, steps=1, seed=3, **SMALL)
    model, loss = _untrained_gradients(2, False, seed=3)
    expected = [float(block.linear2.weight.grad.norm()) for block in model.encoder.layers]
    np.testing.assert_allclose(trace["grad_norm"][0], expected, rtol=1e-6)
    assert trace["loss"][0] == pytest.approx(loss, rel=1e-6)


def test_first_adam_step_has_the_same_size_per_entry_whatever_the_gradient():
    # Adam's first update is lr * g / (|g| + eps) per entry (bias-corrected moments): its
    # size is lr for every entry with a non-negligible gradient, however large g is.
    lr = 1e-3
    trace = warmup.early_training_trace(2, norm_first=True, steps=1, lr=lr, seed=0, **SMALL)
    model, _ = _untrained_gradients(2, True, seed=0)
    expected = []
    for block in model.encoder.layers:
        w, g = block.linear2.weight.detach(), block.linear2.weight.grad
        expected.append(float((lr * g / (g.abs() + 1e-8)).norm() / w.norm()))
    np.testing.assert_allclose(trace["update_ratio"][0], expected, rtol=1e-4)
    assert trace["output_change"][0] > 0


def test_no_warmup_means_constant_rate_and_seeds_differ():
    runs = warmup.traces_over_seeds([0, 1], 2, True, steps=3, lr=0.01, **SMALL)
    assert runs["grad_norm"].shape == (2, 3, 2) and runs["accuracy"].shape == (2,)
    np.testing.assert_array_equal(runs["lr"], 0.01)
    assert not np.allclose(runs["loss"][0], runs["loss"][1])
    again = warmup.traces_over_seeds([0], 2, True, steps=3, lr=0.01, **SMALL)
    np.testing.assert_array_equal(again["loss"][0], runs["loss"][0])  # deterministic


def test_caller_random_state_survives():
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    warmup.early_training_trace(1, norm_first=False, steps=1, **SMALL)
    assert torch.equal(torch.rand(3), expected)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_layers": 0}, "num_layers"), ({"steps": 0}, "steps"), ({"lr": 0.0}, "lr"),
    ({"warmup_steps": -1}, "warmup_steps"), ({"probe_steps": -1}, "probe_steps"),
])
def test_bad_arguments_name_the_argument(kwargs, match):
    args = {"num_layers": 1, "norm_first": True, "steps": 1, **SMALL, **kwargs}
    with pytest.raises(ValueError, match=match):
        warmup.early_training_trace(**args)


@pytest.mark.parametrize(("kwargs", "match"), [
    ({"num_layers": 1.0}, "num_layers must be an int"), ({"steps": True}, "steps must be an int"),
    ({"probe_steps": 0.5}, "probe_steps must be an int"),
])
def test_non_integers_are_type_errors_naming_the_argument(kwargs, match):
    # the library's one rule (_validation.as_int): floats and bools are not ints
    args = {"num_layers": 1, "norm_first": True, "steps": 1, **SMALL, **kwargs}
    with pytest.raises(TypeError, match=match):
        warmup.early_training_trace(**args)


def test_numpy_and_tensor_integers_are_accepted():
    trace = warmup.early_training_trace(np.int64(2), norm_first=True, steps=torch.tensor(2),
                                        probe_steps=np.int32(1), **SMALL)
    assert trace["grad_norm"].shape == (2, 2)


def test_traces_over_seeds_needs_a_seed():
    with pytest.raises(ValueError, match="seeds"):
        warmup.traces_over_seeds([], 1, True, steps=1, **SMALL)
