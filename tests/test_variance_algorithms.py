"""Tests for layernorm_tutorial.variance_algorithms: three variance algorithms, merging."""

import numpy as np
import pytest
import torch

from layernorm_tutorial.variance_algorithms import (
    VARIANCE_ALGORITHMS,
    WelfordState,
    naive_variance,
    two_pass_variance,
    variance_relative_error,
    welford_merge,
    welford_update,
    welford_variance,
)


@pytest.mark.parametrize("name", list(VARIANCE_ALGORITHMS))
@pytest.mark.parametrize("correction", [0, 1])
@pytest.mark.parametrize("dim", [0, 1, -1])
def test_matches_torch_var_in_float64(name, correction, dim):
    x = torch.randn(5, 7, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(1))
    got = VARIANCE_ALGORITHMS[name](x, dim=dim, correction=correction)
    expected = torch.var(x, dim=dim, correction=correction)
    assert got.shape == expected.shape
    torch.testing.assert_close(got, expected, rtol=1e-10, atol=1e-12)


@pytest.mark.parametrize("name", list(VARIANCE_ALGORITHMS))
def test_keeps_input_dtype(name):
    x = torch.randn(4, 9, dtype=torch.float32)
    assert VARIANCE_ALGORITHMS[name](x).dtype == torch.float32


def test_naive_loses_digits_in_float32_but_two_pass_and_welford_do_not():
    g = torch.Generator().manual_seed(0)
    x = (1e4 + torch.randn(16, 512, dtype=torch.float64, generator=g)).float()
    reference = two_pass_variance(x.double())

    def rel(v):
        return ((v.double() - reference).abs() / reference).median().item()

    assert rel(naive_variance(x)) > 0.1
    assert rel(two_pass_variance(x)) < 1e-5
    assert rel(welford_variance(x)) < 1e-3


def test_welford_update_on_scalars_matches_numpy():
    values = np.random.default_rng(3).standard_normal(50) + 7
    count, mean, m2 = 0, 0.0, 0.0
    for v in values:
        count, mean, m2 = welford_update(count, mean, m2, v)
    assert count == 50
    assert np.isclose(mean, values.mean(), rtol=1e-13)
    assert np.isclose(m2 / count, values.var(), rtol=1e-12)


def test_welford_merge_equals_one_pass_over_both_chunks():
    x = torch.randn(3, 20, dtype=torch.float64, generator=torch.Generator().manual_seed(2)) + 4

    def state(chunk):
        return WelfordState(chunk.shape[-1], chunk.mean(-1), two_pass_variance(chunk) *
                            chunk.shape[-1])

    merged = welford_merge(state(x[:, :7]), state(x[:, 7:]))
    assert merged.count == 20
    torch.testing.assert_close(merged.mean, x.mean(-1))
    torch.testing.assert_close(merged.m2 / 20, two_pass_variance(x))
    empty = WelfordState(0, torch.zeros(3), torch.zeros(3))
    assert welford_merge(empty, state(x)).count == 20
    assert welford_merge(state(x), empty).count == 20


def test_bad_inputs_raise_clear_errors():
    with pytest.raises(TypeError, match="torch.Tensor"):
        naive_variance(np.ones(3))
    with pytest.raises(TypeError, match="floating"):
        two_pass_variance(torch.ones(3, dtype=torch.int64))
    with pytest.raises(IndexError, match="dim"):
        welford_variance(torch.ones(2, 3), dim=2)
    with pytest.raises(ValueError, match="correction"):
        naive_variance(torch.ones(3), correction=2)
    with pytest.raises(ValueError, match="more than 1"):
        naive_variance(torch.ones(1), correction=1)
    with pytest.raises(ValueError, match="offsets"):
        variance_relative_error([])


def test_relative_error_sweep_shows_the_expected_ordering():
    result = variance_relative_error([1.0, 1e4], features=128, rows=8)
    assert set(result) >= {"offsets", "naive", "two-pass", "Welford", "negative_naive"}
    assert result["naive"][1] > 100 * result["naive"][0]
    assert result["naive"][1] > result["Welford"][1] > result["two-pass"][1]
