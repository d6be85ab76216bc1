"""Generated single-cell counts have the promised profiles, library sizes and determinism."""

import pytest
import torch

from layernorm_tutorial.lab.ln_vs_bn.synthetic_cells import cell_type_profiles, synthetic_counts


def test_profiles_are_proportions_with_disjoint_markers():
    p = cell_type_profiles(n_types=3, n_genes=100, markers=10, seed=1)
    assert p.shape == (3, 100)
    torch.testing.assert_close(p.sum(dim=1), torch.ones(3, dtype=torch.float64))
    top = [set(row.topk(10).indices.tolist()) for row in p / p.mean(dim=0)]
    assert all(not (top[i] & top[j]) for i in range(3) for j in range(i + 1, 3))


def test_counts_follow_the_library_size_and_type():
    p = cell_type_profiles(n_types=2, n_genes=200, markers=20)
    counts = synthetic_counts([0] * 200 + [1] * 200, [1000.0] * 200 + [10000.0] * 200, p)
    assert counts.shape == (400, 200) and (counts >= 0).all()
    totals = counts.sum(dim=1)
    assert abs(totals[:200].mean() / 1000 - 1) < 0.01
    assert abs(totals[200:].mean() / 10000 - 1) < 0.01
    torch.testing.assert_close(counts[200:].mean(0) / 10000, p[1], atol=2e-3, rtol=0.1)


def test_deterministic_per_seed():
    p = cell_type_profiles()
    a, b = (synthetic_counts([0, 1], [500, 500], p, seed=3) for _ in range(2))
    assert torch.equal(a, b)
    assert not torch.equal(a, synthetic_counts([0, 1], [500, 500], p, seed=4))


@pytest.mark.parametrize(("types", "sizes", "match"), [
    ([0, 1], [1.0], "equal length"), ([7], [1.0], "cell_types"), ([0], [0.0], "positive")])
def test_bad_arguments(types, sizes, match):
    with pytest.raises(ValueError, match=match):
        synthetic_counts(types, sizes, cell_type_profiles())


def test_too_many_markers():
    with pytest.raises(ValueError, match="markers"):
        cell_type_profiles(n_types=5, n_genes=10, markers=3)
