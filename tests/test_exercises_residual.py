"""The residual chapter's checkers accept the references and diagnose typical mistakes."""

import numpy as np

from layernorm_tutorial.lab.residual import exercises as ex


def test_block_checker_accepts_references():
    result = ex.check_block_arrangements(ex.post_ln_block_reference, ex.pre_ln_block_reference)
    assert result.passed, result.message


def test_block_checker_detects_swapped_arrangements():
    result = ex.check_block_arrangements(ex.pre_ln_block_reference, ex.post_ln_block_reference)
    assert not result.passed and "swapped" in result.message


def test_block_checker_names_other_mistakes():
    def branch_only(x, att, ff, n1, n2):
        x = x + n1(att(x))
        return x + n2(ff(x))

    def same_norm(x, att, ff, n1, n2):
        x = n1(x + att(x))
        return n1(x + ff(x))

    def no_residual(x, att, ff, n1, n2):
        return n2(ff(n1(att(x))))

    def skip_normalized(x, att, ff, n1, n2):
        x = n1(x) + att(n1(x))
        return n2(x) + ff(n2(x))

    cases = [(branch_only, ex.pre_ln_block_reference, "only the branch"),
             (same_norm, ex.pre_ln_block_reference, "same norm"),
             (no_residual, ex.pre_ln_block_reference, "residual connection is missing"),
             (ex.post_ln_block_reference, skip_normalized, "skip path")]
    for post, pre, phrase in cases:
        result = ex.check_block_arrangements(post, pre)
        assert not result.passed and phrase in result.message, (phrase, result.message)


def test_block_checker_reports_exceptions_and_shapes():
    def broken(*args):
        raise KeyError("x")
    assert "KeyError" in ex.check_block_arrangements(broken, broken).message
    assert "shape" in ex.check_block_arrangements(lambda x, *p: x[:, 0],
                                                  ex.pre_ln_block_reference).message


def test_variance_checker_accepts_reference_and_diagnoses():
    assert ex.check_residual_variance_prediction(ex.predict_residual_variance_reference).passed
    cases = {"plain stack": lambda v0, b: np.asarray(b),
             "v_0 is missing": lambda v0, b: np.cumsum(b),
             "do not multiply": lambda v0, b: v0 * np.cumprod(b),
             "without v_0": lambda v0, b: np.concatenate([[v0], v0 + np.cumsum(b)])}
    for phrase, fn in cases.items():
        result = ex.check_residual_variance_prediction(fn)
        assert not result.passed and phrase in result.message, (phrase, result.message)


def test_reference_prediction_matches_a_measured_residual_stack():
    from layernorm_tutorial.lab.residual import experiments as residual_experiments
    r = residual_experiments.residual_variance_by_depth(depth=8, width=64, batch_size=128,
                                                        architecture="residual")
    predicted = ex.predict_residual_variance_reference(r["variance"][0], r["branch_variance"])
    np.testing.assert_allclose(r["variance"][1:], predicted, rtol=0.15)
