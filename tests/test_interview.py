"""Helpers behind the interview chapters (drill solutions and demonstrations), in the modules
of their subjects."""

import numpy as np
import pytest
import torch
import torch.nn.functional as TF

from layernorm_tutorial import roofline, variance_algorithms
from layernorm_tutorial.lab.common import formatting
from layernorm_tutorial.lab.interview import folding, llama_eps
from layernorm_tutorial.lab.interview import per_sample_gradients as psg
from layernorm_tutorial.lab.interview import sharded_batch_norm as sharded
from layernorm_tutorial.lab.ln_vs_bn import exercises as bn_drill
from layernorm_tutorial.lab.norm_family import group_norm_exercises as gn_drill
from layernorm_tutorial.lab.residual import experiments as residual_experiments
from layernorm_tutorial.lab.rnn import experiments as rnn_experiments


@pytest.fixture
def one_thread():
    """Tiny float64 matmuls: run them on one thread (faster on a busy machine), then restore."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


def test_fmt_hides_round_off_and_formats_the_rest():
    assert formatting.fmt(3e-17) == "< 1e-12"
    assert formatting.fmt(-3e-17) == "< 1e-12"
    assert formatting.fmt(2.5e-3) == "2.5e-03"
    assert formatting.fmt(np.float64(0.123456), spec=".3f") == "0.123"
    assert formatting.fmt(1e-9, floor=1e-8) == "< 1e-08"
    assert formatting.fmt(torch.tensor(0.5, requires_grad=True), spec=".2f") == "0.50"


def test_batch_norm_solution_matches_torch_over_several_steps():
    rng = np.random.default_rng(1)
    layer = bn_drill.BatchNormWithRunningStats(3, momentum=0.2)
    layer.gamma, layer.beta = rng.uniform(0.5, 2, 3), rng.standard_normal(3)
    ref = torch.nn.BatchNorm1d(3, momentum=0.2).double()
    with torch.no_grad():
        ref.weight.copy_(torch.from_numpy(layer.gamma))
        ref.bias.copy_(torch.from_numpy(layer.beta))
    for training in (True, True, False):
        x = rng.standard_normal((7, 3)) * 2 + 1
        ref.train(training)
        expected = ref(torch.from_numpy(x)).detach().numpy()
        np.testing.assert_allclose(layer.forward(x, training=training), expected, rtol=1e-10)
    np.testing.assert_allclose(layer.running_var, ref.running_var.numpy(), rtol=1e-12)
    np.testing.assert_allclose(layer.running_mean, ref.running_mean.numpy(), rtol=1e-12)


def test_batch_norm_solution_rejects_bad_input():
    layer = bn_drill.BatchNormWithRunningStats(3)
    with pytest.raises(ValueError, match="at least 2 samples"):
        layer.forward(np.ones((1, 3)), training=True)
    with pytest.raises(ValueError, match=r"\(N, 3\)"):
        layer.forward(np.ones((4, 2)), training=True)


@pytest.mark.parametrize("shape, groups", [((2, 6, 4, 3), 3), ((3, 4, 5), 2), ((1, 4, 2, 2, 2), 4)])
def test_group_norm_solution_matches_torch(shape, groups):
    rng = np.random.default_rng(2)
    x = rng.standard_normal(shape)
    gamma, beta = rng.standard_normal(shape[1]), rng.standard_normal(shape[1])
    expected = TF.group_norm(torch.from_numpy(x), groups, torch.from_numpy(gamma),
                            torch.from_numpy(beta)).numpy()
    np.testing.assert_allclose(gn_drill.group_norm_via_reshape(x, groups, gamma, beta), expected,
                               rtol=1e-10, atol=1e-12)
    with pytest.raises(ValueError, match="divide"):
        gn_drill.group_norm_via_reshape(x, 5, gamma, beta)


def test_batchmate_influence_separates_batch_norm_from_layer_norm():
    assert psg.batchmate_influence("layer", seed=3) == 0.0
    assert psg.batchmate_influence("none", seed=3) == 0.0
    assert psg.batchmate_influence("batch", seed=3) > 1e-3
    with pytest.raises(ValueError, match="norm must be one of"):
        psg.batchmate_influence("group")


def test_vmap_per_sample_gradients_equal_in_batch_gradients_for_layer_norm():
    params = psg.init_mlp_params(seed=4)
    g = torch.Generator().manual_seed(4)
    x = torch.randn(5, 6, generator=g, dtype=torch.float64)
    y = torch.randint(0, 3, (5,), generator=g)
    per_sample = psg.per_sample_gradients(params, x, y, "layer")
    for i in range(5):
        in_batch = psg.sample_gradient(params, x, y, i, "layer")
        for k in params:
            torch.testing.assert_close(per_sample[k][i], in_batch[k])
    # and the per-sample gradients sum to the gradient of the summed loss
    total = torch.func.grad(lambda p: psg.mlp_losses(p, x, y, "layer").sum())(params)
    for k in params:
        torch.testing.assert_close(per_sample[k].sum(0), total[k])


def test_fold_affine_into_next_linear_is_exact():
    g = torch.Generator().manual_seed(5)
    gamma, beta = torch.randn(8, generator=g), torch.randn(8, generator=g)
    w, b = torch.randn(4, 8, generator=g), torch.randn(4, generator=g)
    xhat = torch.randn(3, 8, generator=g)
    w2, b2 = folding.fold_affine_into_next_linear(gamma, beta, w, b)
    torch.testing.assert_close(xhat @ w2.T + b2, (gamma * xhat + beta) @ w.T + b)
    with pytest.raises(ValueError, match="weight must be"):
        folding.fold_affine_into_next_linear(gamma, beta, w.T, b)


def test_fold_batch_norm_into_previous_linear_matches_eval_mode():
    torch.manual_seed(6)
    lin, bn = torch.nn.Linear(5, 4).double(), torch.nn.BatchNorm1d(4).double()
    bn.train()
    for _ in range(3):
        bn(lin(torch.randn(16, 5, dtype=torch.float64)))
    bn.eval()
    w, b = folding.fold_batch_norm_into_previous_linear(lin.weight, lin.bias, bn.running_mean,
                                                  bn.running_var, bn.weight, bn.bias, bn.eps)
    x = torch.randn(6, 5, dtype=torch.float64)
    torch.testing.assert_close(x @ w.T + b, bn(lin(x)))


def test_sharded_moments_merge_to_full_batch_moments():
    x = torch.randn(10, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(7)) + 2
    means, variances, counts = sharded.shard_moments(x, 3)  # unequal shards: 4, 3, 3
    assert counts.tolist() == [4.0, 3.0, 3.0]
    mean, var = variance_algorithms.merge_moments(means, variances, counts)
    torch.testing.assert_close(mean, x.mean(0))
    torch.testing.assert_close(var, x.var(0, correction=0))
    with pytest.raises(ValueError, match="exceeds the batch size"):
        sharded.shard_moments(x, 11)


def test_unsynchronized_batch_norm_differs_from_full_batch_but_equals_per_shard():
    x = torch.randn(8, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(8))
    out = sharded.unsynchronized_batch_norm(x, 2)
    full = TF.batch_norm(x, None, None, training=True)
    assert (out - full).abs().max() > 1e-3
    torch.testing.assert_close(out[:4], TF.batch_norm(x[:4], None, None, training=True))
    torch.testing.assert_close(sharded.unsynchronized_batch_norm(x, 1), full)


def test_norm_traffic_counts_bytes_and_flops():
    rows, cols = 3, 5
    fused = roofline.norm_traffic(rows, cols, dtype_bytes=2)
    # read x, write y, read gamma and beta, save mean and rstd in fp32
    assert fused.bytes_moved == 2 * rows * cols * 2 + 2 * cols * 2 + 2 * rows * 4
    assert fused.kernels == 1 and fused.flops == 7 * rows * cols
    eager = roofline.norm_traffic(rows, cols, fused=False, dtype_bytes=2)
    assert eager.kernels == 8 and eager.flops == fused.flops
    assert eager.bytes_moved > 5 * rows * cols * 2 * 2  # many more passes over the tensor
    rms = roofline.norm_traffic(rows, cols, kind="rms")
    assert rms.bytes_moved < fused.bytes_moved and rms.flops < fused.flops
    assert fused.intensity == pytest.approx(fused.flops / fused.bytes_moved)
    with pytest.raises(ValueError, match="kind"):
        roofline.norm_traffic(rows, cols, kind="batch")


def test_sequential_moments_float64_is_exact_and_float16_is_not():
    rng = np.random.default_rng(9)
    v = rng.normal(3.0, 1.0, 4096)
    mean, var = variance_algorithms.sequential_moments(v, np.float64)
    assert mean == pytest.approx(v.mean(), rel=1e-12) and var == pytest.approx(v.var(), rel=1e-10)
    mean16, _ = variance_algorithms.sequential_moments(v, np.float16)
    assert abs(mean16 - v.mean()) > 0.05  # the fp16 running sum stops absorbing small terms
    _, var16 = variance_algorithms.sequential_moments(rng.normal(0, 5.0, 4096), np.float16)
    assert np.isinf(var16)  # the sum of squares overflows fp16's maximum, 65504
    with pytest.raises(ValueError, match="1-D"):
        variance_algorithms.sequential_moments(np.ones((2, 2)), np.float32)


def test_residual_stack_pre_ln_gradient_shrinks_with_depth_post_ln_does_not(one_thread):
    pre_shallow, _ = residual_experiments.residual_stack_at_init(depth=4, placement="pre")
    pre_deep, pre_var = residual_experiments.residual_stack_at_init(depth=32, placement="pre")
    post_shallow, _ = residual_experiments.residual_stack_at_init(depth=4, placement="post")
    post_deep, post_var = residual_experiments.residual_stack_at_init(depth=32, placement="post")
    assert pre_deep[-1] < 0.6 * pre_shallow[-1]
    assert 0.7 < post_deep[-1] / post_shallow[-1] < 1.5
    assert pre_var[-1] > 10 * pre_var[0]            # variance accumulates on the stream
    np.testing.assert_allclose(post_var[1:], 1.0, atol=0.05)  # re-normalized every block
    assert pre_deep.shape == (32,) and pre_var.shape == (33,)
    with pytest.raises(ValueError, match="placement"):
        residual_experiments.residual_stack_at_init(placement="sandwich")


def test_rnn_layer_norm_reduces_saturation_and_explosion(one_thread):
    plain, sat_plain = rnn_experiments.rnn_gradient_norms(steps=40, weight_scale=3.0)
    normed, sat_ln = rnn_experiments.rnn_gradient_norms(steps=40, weight_scale=3.0,
                                                        use_layer_norm=True)
    assert plain.shape == normed.shape == (40,)
    assert sat_ln < sat_plain
    assert plain[0] / plain[-1] > 100 * normed[0] / normed[-1]


def test_torch_layer_norm_saves_its_input_and_the_memory_efficient_one_its_output():
    from layernorm_tutorial.lab.interview import saved_memory

    g = torch.Generator().manual_seed(10)
    x = torch.randn(6, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w = (torch.rand(5, dtype=torch.float64, generator=g) + 0.5).requires_grad_()
    b = torch.randn(5, dtype=torch.float64, generator=g, requires_grad=True)
    y, saved = saved_memory.saved_tensors(TF.layer_norm, x, (5,), w, b)
    assert any(s.is_storage_of(x) for s in saved) and not any(s.is_storage_of(y) for s in saved)
    assert saved_memory.unique_bytes(saved, ignore=(w, b)) == (30 + 6 + 6) * 8  # x, mean, rstd
    mine, saved = saved_memory.saved_tensors(saved_memory.layer_norm_saving_output,
                                             x, (5,), w, b)
    assert any(s.is_storage_of(mine) for s in saved) and not any(s.is_storage_of(x) for s in saved)
    assert saved_memory.unique_bytes(saved, ignore=(w, b)) == (30 + 6) * 8      # y, rstd
    torch.testing.assert_close(mine, y)
    assert torch.autograd.gradcheck(
        lambda x, w, b: saved_memory.layer_norm_saving_output(x, (5,), w, b), (x, w, b))
    x3 = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=g, requires_grad=True)
    w3 = torch.rand(4, 5, dtype=torch.float64, generator=g) + 0.5
    w3.requires_grad_()
    b3 = torch.zeros(4, 5, dtype=torch.float64, requires_grad=True)
    dy = torch.randn(2, 3, 4, 5, dtype=torch.float64, generator=g)
    ours = torch.autograd.grad(saved_memory.layer_norm_saving_output(x3, (4, 5), w3, b3),
                               (x3, w3, b3), dy)
    ref = torch.autograd.grad(TF.layer_norm(x3, (4, 5), w3, b3), (x3, w3, b3), dy)
    for a, r in zip(ours, ref, strict=True):
        torch.testing.assert_close(a, r)


def test_layer_norm_saving_output_rejects_what_it_cannot_invert():
    from layernorm_tutorial.lab.interview import saved_memory

    x = torch.randn(3, 4)
    with pytest.raises(ValueError, match="no zero"):
        saved_memory.layer_norm_saving_output(x, (4,), torch.tensor([1.0, 0.0, 1.0, 1.0]),
                                              torch.zeros(4))
    with pytest.raises(ValueError, match="required"):
        saved_memory.layer_norm_saving_output(x, (4,), None, torch.zeros(4))
    with pytest.raises(ValueError, match=r"shape \(4,\)"):
        saved_memory.layer_norm_saving_output(x, 4, torch.ones(3), torch.zeros(3))
    with pytest.raises(ValueError, match="end with"):
        saved_memory.layer_norm_saving_output(x, (3,), torch.ones(3), torch.zeros(3))


def test_gathered_mean_invstd_count_merge_to_the_full_batch_statistics():
    x = torch.randn(11, 3, dtype=torch.float64, generator=torch.Generator().manual_seed(11)) * 3 + 2
    means, variances, counts = sharded.shard_moments(x, 3)              # 4, 4, 3 samples
    mean, invstd = sharded.merge_gathered_statistics(means, torch.rsqrt(variances + 1e-3),
                                                     counts, eps=1e-3)
    torch.testing.assert_close(mean, x.mean(0))
    torch.testing.assert_close(invstd, torch.rsqrt(x.var(0, correction=0) + 1e-3))
    with pytest.raises(ValueError, match=r"\(K, C\)"):
        sharded.merge_gathered_statistics(means, variances[:2], counts)


def test_torch_sync_batch_norm_gathers_in_the_forward_and_reduces_in_the_backward():
    found = sharded.torch_sync_batch_norm_collectives()
    assert any(name.startswith("all_gather") for name in found["forward"])
    assert not any(name.startswith("all_reduce") for name in found["forward"])
    assert found["backward"] == ["all_reduce"]


def test_aten_ops_sees_one_fused_operator_for_layer_norm():
    from layernorm_tutorial.lab.interview import fusion

    x = torch.randn(3, 8)
    assert fusion.aten_ops(TF.layer_norm, x, (8,)) == ["native_layer_norm"]
    by_hand = fusion.aten_ops(lambda t: (t - t.mean(-1, keepdim=True)) / t.std(-1, keepdim=True), x)
    assert len(by_hand) >= 3 and "native_layer_norm" not in by_hand


def test_residual_norm_plans_count_bytes_per_element():
    from layernorm_tutorial.lab.interview import fusion

    per = fusion.bytes_per_element
    # add + LN unfused: add reads 2 and writes 1 tensor, LN reads 1 and writes 1 (bf16)
    assert per(fusion.residual_norm_plan(fused=False, dropout=False)) == 2 * (3 + 2)
    assert per(fusion.residual_norm_plan(fused=True, dropout=False)) == 2 * 4
    assert per(fusion.residual_norm_plan(fused=True, dropout=False, out_bytes=1)) == 2 * 3 + 1
    unfused = fusion.residual_norm_plan(fused=False, out_bytes=1)
    assert [k.name.split()[0] for k in unfused] == ["dropout", "residual", "layer_norm", "quantize"]
    assert per(unfused) == (2 + 2 + 1) + 6 + 4 + (2 + 1)
    assert per(fusion.residual_norm_plan(fused=True, keep_mask=False)) == 2 * 4
    assert per(fusion.layer_norm_backward_plan(single_pass=False)) == 10
    assert per(fusion.layer_norm_backward_plan(single_pass=True, act_bytes=4)) == 12
    with pytest.raises(ValueError, match="out_bytes"):
        fusion.residual_norm_plan(fused=True, out_bytes=0)


def test_adaln_zero_block_is_the_identity_at_init_and_conditions_per_sample():
    from layernorm_tutorial.lab.interview import adaln

    torch.manual_seed(12)
    block = adaln.AdaLNZeroBlock(8, cond_dim=4).double()
    x = torch.randn(2, 5, 8, dtype=torch.float64)
    c = torch.randn(2, 4, dtype=torch.float64)
    torch.testing.assert_close(block(x, c), x)                 # gate = 0: identity
    with torch.no_grad():
        block.modulation.weight.normal_()
    out = block(x, c)
    assert (out - x).abs().max() > 1e-3
    same_x = block(x[:1].expand(2, 5, 8), c)                   # one input, two conditions
    assert (same_x[0] - same_x[1]).abs().max() > 1e-3
    shift, scale, gate = block.modulations(c)
    assert shift.shape == scale.shape == gate.shape == (2, 1, 8)
    with pytest.raises(ValueError, match=r"c must be \(B, 4\)"):
        block(x, torch.randn(2, 3, dtype=torch.float64))
    with pytest.raises(ValueError, match="x must be"):
        block(x[0], c)


def test_feature_sharded_rms_norm_equals_rms_norm_after_one_reduction():
    from layernorm_tutorial import functional
    from layernorm_tutorial.lab.interview import tensor_parallel

    g = torch.Generator().manual_seed(13)
    x = torch.randn(2, 3, 10, dtype=torch.float64, generator=g)
    w = torch.rand(10, dtype=torch.float64, generator=g) + 0.5
    for shards in (1, 3, 10):
        y, partial = tensor_parallel.feature_sharded_rms_norm(x, w, shards, eps=1e-6)
        torch.testing.assert_close(y, functional.rms_norm(x, (10,), w, eps=1e-6))
        assert partial.shape == (shards, 2, 3)
        torch.testing.assert_close(partial.sum(0), (x * x).sum(-1))
    y, _ = tensor_parallel.feature_sharded_rms_norm(x, None, 2)
    torch.testing.assert_close(y, functional.rms_norm(x, (10,), eps=1e-6))
    with pytest.raises(ValueError, match="num_shards"):
        tensor_parallel.feature_sharded_rms_norm(x, w, 11)
    with pytest.raises(ValueError, match=r"weight must have shape \(10,\)"):
        tensor_parallel.feature_sharded_rms_norm(x, w[:5], 2)


def test_massive_activation_takes_the_rows_variance_and_int8_scales_follow_the_outlier():
    from layernorm_tutorial import functional
    from layernorm_tutorial.lab.interview import outliers

    x = outliers.row_with_massive_activation(features=32, magnitude=500.0, index=3, tokens=4)
    assert x.shape == (4, 32) and torch.all(x[:, 3] == 500.0)
    y = functional.layer_norm(x, (32,))
    assert torch.allclose(y[:, 3], torch.full((4,), 31 ** 0.5, dtype=torch.float64), atol=0.02)
    others = y[:, [j for j in range(32) if j != 3]]
    assert others.std(-1).max() < 0.05                  # the other features nearly collapse
    assert torch.allclose(others.mean(-1), torch.full((4,), -(31 ** -0.5), dtype=torch.float64),
                          atol=0.01)
    with pytest.raises(ValueError, match="index"):
        outliers.row_with_massive_activation(features=8, index=8)

    z = torch.tensor([[1.0, 0.3, 0.25], [100.0, 0.3, -0.2]], dtype=torch.float64)
    per_tensor = outliers.fake_quantize_int8(z, "tensor")
    assert per_tensor[0, 1] == 0.0                     # step 100/127 swallows small values
    torch.testing.assert_close(outliers.fake_quantize_int8(z, "token")[0], torch.tensor(
        [1.0, 38 / 127, 32 / 127], dtype=torch.float64))
    assert (outliers.fake_quantize_int8(z, "channel") - z).abs().max() < 0.4
    assert torch.equal(outliers.fake_quantize_int8(torch.zeros(2, 2), "tensor"), torch.zeros(2, 2))
    with pytest.raises(ValueError, match="per must be"):
        outliers.fake_quantize_int8(z, "row")
    with pytest.raises(ValueError, match="rows, cols"):
        outliers.fake_quantize_int8(z[0], "tensor")


def test_every_question_of_part_2_is_followed_by_a_cell_that_proves_it():
    """interview-adv (issue 35): each question in interview_advanced has a short answer and,
    before the next question, a code cell with at least one assert."""
    import re
    from pathlib import Path

    import nbformat

    cells = nbformat.read(Path(__file__).parents[1] / "book" / "interview_advanced.ipynb",
                          as_version=4).cells
    starts = [i for i, c in enumerate(cells) if c.cell_type == "markdown"
              and "{admonition} Model answer" in c.source and "### " in c.source]
    assert len(starts) >= 40
    for n, i in enumerate(starts):
        assert "**Short answer:**" in cells[i].source, cells[i].source[:60]
        end = starts[n + 1] if n + 1 < len(starts) else len(cells)
        code = [c.source for c in cells[i + 1:end] if c.cell_type == "code"]
        title = re.search(r"^### (.+)$", cells[i].source, re.M).group(1)
        assert any(re.search(r"^\s*assert |check_|print\(check", s, re.M) for s in code), title


def test_llama_eps_is_read_from_the_transformers_configuration_classes():
    configs = llama_eps.traced_configs()
    assert set(configs) == set(llama_eps.CLASSES)
    first, third = configs["LlamaConfig"], configs["MllamaTextConfig"]
    assert first["rms_norm_eps"] == 1e-6 and third["rms_norm_eps"] == 1e-5
    # the first LLaMA's 7B shape; a Llama 3 vocabulary and MLP
    assert (first["hidden_size"], first["max_position_embeddings"]) == (4096, 2048)
    assert (third["vocab_size"], third["intermediate_size"]) == (128256, 14336)


def test_rms_norm_in_16_bit_uses_float32_eps():
    from layernorm_tutorial.lab.interview import llama_eps

    for dtype, y, own in llama_eps.rms_norm_16_bit_eps():
        assert abs(y - 1) < 2e-3, dtype     # fp32's eps: about 1 for rows of 0.01
        assert own < 0.5, dtype             # the dtype's own eps would shrink it


def test_norm_defaults_match_torch_modules():
    import torch

    from layernorm_tutorial.lab.interview.norm_defaults import norm_defaults

    lines = norm_defaults()
    assert lines[0].startswith("LayerNorm  : eps 1e-05")
    assert f"momentum {torch.nn.BatchNorm1d(8).momentum}" in lines[1]
    assert torch.nn.RMSNorm(8).eps is None and "None" in lines[3]
    assert lines[-1] == f"float32 machine epsilon: {torch.finfo(torch.float32).eps:.3g}"
