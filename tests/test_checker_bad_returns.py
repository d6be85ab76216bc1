"""Every public exercise checker survives any return value (issue 24, item 5).

A reader's solution may return None (a forgotten ``return``), something that is not numbers,
or an array of the wrong shape. Each checker must answer with a failed CheckResult and one
sentence saying so, never a traceback from inside the checker. The checkers are found by
scanning the lab's exercise modules (``exercises.py`` and ``*_exercises.py``, where the lab
keeps every checker) for public ``check_*`` functions, so a new checker is tested without
being listed here.
"""

import ast
import importlib
from pathlib import Path

import numpy as np
import pytest
import torch

import layernorm_tutorial.lab as lab
from layernorm_tutorial import numpy_ref
from layernorm_tutorial.lab.common import checking
from layernorm_tutorial.lab.residual import exercises as residual

LAB = Path(lab.__file__).parent
NONE_SENTENCE = "your function `reader` returned None: did you forget `return`?"


def _public_checkers() -> dict:
    """``{"module.check_name": function}``: every public ``check_*`` of the exercise modules."""
    found = {}
    for path in sorted(LAB.rglob("*exercises.py")):
        tree = ast.parse(path.read_text())
        names = [node.name for node in tree.body
                 if isinstance(node, ast.FunctionDef) and node.name.startswith("check_")]
        if not names:
            continue
        parts = path.relative_to(LAB.parent.parent).with_suffix("").parts
        module = importlib.import_module(".".join(parts))
        for name in names:
            found[f"{module.__name__.removeprefix('layernorm_tutorial.lab.')}.{name}"] = \
                getattr(module, name)
    return found


CHECKERS = _public_checkers()

# Correct solutions for the checkers that take more than one of the reader's functions, so
# that each function can be the bad one while the others are right.
CORRECT = {
    "check_layer_norm": {"forward": numpy_ref.layer_norm_forward,
                         "backward": numpy_ref.layer_norm_backward},
    "check_block_arrangements": {"post_ln_block": residual.post_ln_block_reference,
                                 "pre_ln_block": residual.pre_ln_block_reference},
}

BAD_RETURNS = {
    "None": None,
    "a string": "abc",
    "a dict": {"out": 1.0},
    "an object": object(),
    "a number": 3,
    "a wrong-shape array": np.zeros(7),
    "a wrong-shape tensor": torch.zeros(7),
    "a pair of wrong shapes": (np.zeros(7), np.zeros(7)),
    "a triple of wrong shapes": (np.zeros(7), np.zeros(7), np.zeros(7)),
}
WRONG_SHAPES = {"a wrong-shape array", "a wrong-shape tensor", "a pair of wrong shapes",
                "a triple of wrong shapes"}


def _solution_slots(check) -> list[str]:
    """The checker's parameters for the reader's code: those before the ``*``."""
    import inspect

    return [name for name, p in inspect.signature(check).parameters.items()
            if p.kind is p.POSITIONAL_OR_KEYWORD]


def _cases():
    for key, check in CHECKERS.items():
        for slot in _solution_slots(check):
            yield pytest.param(key, slot, id=f"{key}-{slot}")


def _reader_returning(value):
    def reader(*args, **kwargs):
        return value

    return reader


def _assert_one_sentence(result, bad: str):
    assert isinstance(result, checking.CheckResult), type(result)
    assert not result.passed, result.message
    message = result.message
    assert message and "\n" not in message and "Traceback" not in message, message
    # the checker itself said what is wrong; the catch-all of checker() is a last resort
    assert "which the checker cannot use" not in message, message
    if bad == "None":
        assert message == NONE_SENTENCE
    elif bad in WRONG_SHAPES:
        assert "shape" in message or "return the" in message, message


def test_the_checkers_are_found_and_all_use_the_shared_guard():
    short = {key.rsplit(".", 1)[1] for key in CHECKERS}
    assert {"check_layer_norm", "check_weight_norm", "check_combine_statistics",
            "check_welford_update", "check_ln_lstm_step"} <= short, sorted(CHECKERS)
    unguarded = [key for key, check in CHECKERS.items() if not hasattr(check, "returns")]
    assert unguarded == [], "decorate these with lab.common.checking.checker"
    several = {key.rsplit(".", 1)[1] for key, check in CHECKERS.items()
               if len(_solution_slots(check)) > 1}
    assert several <= set(CORRECT), "add correct solutions for these to CORRECT"


@pytest.mark.parametrize("bad", sorted(BAD_RETURNS))
@pytest.mark.parametrize(("key", "slot"), list(_cases()))
def test_every_checker_survives_a_bad_return(key, slot, bad):
    check = CHECKERS[key]
    correct = CORRECT.get(key.rsplit(".", 1)[1], {})
    solutions = {name: correct.get(name) for name in _solution_slots(check)}
    solutions[slot] = _reader_returning(BAD_RETURNS[bad])
    result = check(**solutions)
    _assert_one_sentence(result, bad)


@pytest.mark.parametrize("bad", sorted(BAD_RETURNS))
def test_the_class_form_of_the_running_statistics_drill_survives_a_bad_forward(bad):
    from layernorm_tutorial.lab.ln_vs_bn.exercises import check_running_statistics

    class Layer:
        def __init__(self, num_features, eps=1e-5, momentum=0.1):
            self.gamma, self.beta = np.ones(num_features), np.zeros(num_features)
            self.running_mean, self.running_var = np.zeros(num_features), np.ones(num_features)

        def forward(self, x, training=True):
            return BAD_RETURNS[bad]

    result = check_running_statistics(Layer)
    if bad == "None":
        assert result.message == "your method `forward` returned None: did you forget `return`?"
    else:
        _assert_one_sentence(result, bad)


def test_a_value_the_checker_chokes_on_still_gives_one_sentence():
    """The last resort: an exception inside a checker is blamed on what the reader returned."""
    @checking.checker(returns="a number")
    def check_inverse(fn):
        return checking.CheckResult(1 / fn(0) == 0, "ok")

    result = check_inverse(lambda x: x)
    assert not result.passed
    assert result.message == ("your function returned an int (0), which the checker cannot use "
                              "(ZeroDivisionError: division by zero); it should return a number")


def test_the_guard_keeps_the_readers_signature_and_correct_answers_passing():
    """Watching a function keeps its name and signature (the GroupNorm drill reads it)."""
    seen = {}

    @checking.checker(returns="anything")
    def check_signature(fn):
        import inspect

        seen["parameters"] = list(inspect.signature(fn).parameters)
        seen["name"] = fn.__name__
        return checking.CheckResult(fn(1, 2) == 3, "added")

    def add(a, b):
        return a + b

    assert check_signature(add).passed
    assert seen == {"parameters": ["a", "b"], "name": "add"}
