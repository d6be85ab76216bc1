"""The family/LN-vs-BN checkers (group norm, weight norm, batch-norm statistics) pass the
reference solutions and diagnose typical mistakes."""

import torch

from layernorm_tutorial.lab.ln_vs_bn import exercises as bn_ex
from layernorm_tutorial.lab.norm_family import group_norm_exercises as gn_ex
from layernorm_tutorial.lab.norm_family import weight_norm_exercises as wn_ex


def test_reference_solutions_pass():
    assert gn_ex.check_group_norm(gn_ex.reference_group_norm).passed
    assert wn_ex.check_weight_norm(wn_ex.reference_weight_norm).passed
    assert bn_ex.check_running_statistics(bn_ex.reference_running_update).passed
    assert bn_ex.check_masked_batch_norm(bn_ex.reference_masked_batch_norm).passed
    assert bn_ex.check_combine_statistics(bn_ex.reference_combine_statistics).passed


def test_group_norm_mistakes_are_named():
    def interleaved(x, groups, eps=1e-5):
        n, c = x.shape[:2]
        y = x.reshape(n, c // groups, groups, *x.shape[2:]).transpose(1, 2)
        y = gn_ex.reference_group_norm(y.reshape(x.shape), groups, eps)
        return y.reshape(n, groups, c // groups, *x.shape[2:]).transpose(1, 2).reshape(x.shape)

    def unbiased(x, groups, eps=1e-5):
        g = x.reshape(x.shape[0], groups, -1)
        return ((g - g.mean(-1, keepdim=True))
                / torch.sqrt(g.var(-1, keepdim=True) + eps)).reshape(x.shape)

    def ignores_groups(x, groups, eps=1e-5):
        return gn_ex.reference_group_norm(x, 1, eps)

    assert "interleaved" in gn_ex.check_group_norm(interleaved).message
    assert "unbiased" in gn_ex.check_group_norm(unbiased).message
    assert "ignored" in gn_ex.check_group_norm(ignores_groups).message
    assert "raised ZeroDivisionError" in gn_ex.check_group_norm(lambda x, g, e: 1 / 0).message


def test_weight_norm_mistake_is_named():
    def along_dim(v, g, dim):
        if dim is None:
            return g * v / v.norm()
        return g * v / torch.sqrt((v * v).sum(dim=dim, keepdim=True))

    result = wn_ex.check_weight_norm(along_dim)
    assert not result.passed and "EXCEPT dim" in result.message


def test_running_update_mistakes_are_named():
    def biased(rm, rv, batch, momentum, step):
        f = 1 / step if momentum is None else momentum
        return (1 - f) * rm + f * batch.mean(0), (1 - f) * rv + f * batch.var(0, unbiased=False)

    def keras(rm, rv, batch, momentum, step):
        f = 1 / step if momentum is None else momentum
        return f * rm + (1 - f) * batch.mean(0), f * rv + (1 - f) * batch.var(0)

    def no_cumulative(rm, rv, batch, momentum, step):
        return bn_ex.reference_running_update(rm, rv, batch, momentum or 0.1, step)

    assert "UNBIASED" in bn_ex.check_running_statistics(biased).message
    assert "weight of the NEW batch" in bn_ex.check_running_statistics(keras).message
    assert "cumulative" in bn_ex.check_running_statistics(no_cumulative).message


def test_masked_and_combine_mistakes_are_named():
    def include_padding(x, mask, eps=1e-5):
        return bn_ex.reference_masked_batch_norm(x, torch.ones_like(mask), eps)

    def naive_var(counts, means, variances):
        return bn_ex.reference_combine_statistics(counts, means, variances)[0], variances.mean(0)

    def unweighted_mean(counts, means, variances):
        return means.mean(0), variances.mean(0)

    assert "include the padding" in bn_ex.check_masked_batch_norm(include_padding).message
    assert "between-shard" in bn_ex.check_combine_statistics(naive_var).message
    assert "weighting" in bn_ex.check_combine_statistics(unweighted_mean).message
