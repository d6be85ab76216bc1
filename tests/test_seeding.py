"""Library calls never reset torch's global random state: a reader's own seeding survives.

Each call below used to run ``torch.manual_seed(seed)`` on the global generator (issue 13);
now it draws from a forked, locally seeded state, so the numbers a reader draws after the
call are the numbers they would have drawn without it, and the call itself stays
reproducible.
"""

import pytest
import torch

from layernorm_tutorial._seeding import seeded
from layernorm_tutorial.lab.common import training
from layernorm_tutorial.lab.residual import exercises as residual_exercises
from layernorm_tutorial.lab.residual import experiments as residual_experiments
from layernorm_tutorial.lab.rnn import exercises as rnn_exercises
from layernorm_tutorial.lab.rnn import experiments as rnn_experiments


def _tiny_digit_sequences():
    x_tr, y_tr, x_te, y_te = rnn_experiments.load_digit_sequences()
    return x_tr[:64], y_tr[:64], x_te[:32], y_te[:32]


CALLS = {
    "training.make_mlp": lambda: training.make_mlp(2, 8, layer_norm=True, seed=3),
    "rnn_experiments.unrolled_dynamics":
        lambda: rnn_experiments.unrolled_dynamics(True, 1.0, steps=3, hidden_size=8),
    "rnn_experiments.train_sequence_classifier":
        lambda: rnn_experiments.train_sequence_classifier("ln_rnn", _tiny_digit_sequences(),
                                                          hidden_size=4, epochs=1),
    "residual_experiments.gradient_norm_per_layer":
        lambda: residual_experiments.gradient_norm_per_layer(1, True, batch_size=4),
    "residual_experiments.train_reverse_task":
        lambda: residual_experiments.train_reverse_task(1, True, steps=1, batch_size=4),
    "residual_experiments.stack_output_spread":
        lambda: residual_experiments.stack_output_spread(1, True, batch_size=4),
    "exercises.rnn.check_ln_lstm_step":
        lambda: rnn_exercises.check_ln_lstm_step(rnn_exercises.ln_lstm_step_reference),
    "exercises.residual.check_block_arrangements":
        lambda: residual_exercises.check_block_arrangements(
            residual_exercises.post_ln_block_reference,
            residual_exercises.pre_ln_block_reference),
}


@pytest.mark.parametrize("name", list(CALLS))
def test_a_readers_seeding_survives_a_call(name):
    torch.manual_seed(1234)
    expected = torch.rand(5)
    torch.manual_seed(1234)
    CALLS[name]()
    assert torch.equal(torch.rand(5), expected), f"{name} changed the global random state"


def test_make_mlp_is_still_fixed_by_its_seed_whatever_the_global_state():
    torch.manual_seed(1)
    first = training.make_mlp(2, 8, layer_norm=False, seed=5)
    torch.manual_seed(2)
    second = training.make_mlp(2, 8, layer_norm=False, seed=5)
    for a, b in zip(first.parameters(), second.parameters(), strict=True):
        assert torch.equal(a, b)
    other = training.make_mlp(2, 8, layer_norm=False, seed=6)
    assert not torch.equal(next(first.parameters()), next(other.parameters()))


def test_seeded_fixes_the_draws_inside_and_restores_the_state_after():
    torch.manual_seed(7)
    after = torch.rand(3)
    torch.manual_seed(7)
    with seeded(0):
        inside = torch.rand(3)
    assert torch.equal(torch.rand(3), after)
    with seeded(0):
        assert torch.equal(torch.rand(3), inside)
