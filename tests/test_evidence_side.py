"""The evidence chapter's side experiments: BN and the initialization scale, LN/BN
combinations, their shared training loop and the stored results file."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from layernorm_tutorial.lab.evidence import bn_init, combinations, side_experiments
from layernorm_tutorial.lab.evidence.data import load_evidence_data
from layernorm_tutorial.lab.evidence.loop import train_for_steps
from layernorm_tutorial.lab.evidence.results import TOLERANCE


@pytest.fixture(scope="module")
def data():
    return load_evidence_data()


@pytest.mark.parametrize("kwargs, name", [({"norm": "gn"}, "norm"), ({"depth": 0}, "depth"),
                                          ({"init_scale": 0.0}, "init_scale")])
def test_deep_mlp_rejects_bad_arguments(kwargs, name):
    with pytest.raises(ValueError, match=name):
        bn_init.DeepMLP(**kwargs)


def test_deep_mlp_init_scale_sets_weight_std():
    torch.manual_seed(0)
    net = bn_init.DeepMLP("bn", depth=3, width=256, init_scale=2.0)
    std = net.hidden[1].weight.std().item()
    assert std == pytest.approx(2.0 * (2.0 / 256) ** 0.5, rel=0.05)
    assert net.hidden[1].bias is None                   # no bias before a norm


@pytest.mark.parametrize("norm", ["bn", "ln"])
def test_normalized_gradients_scale_like_one_over_c(norm, data):
    # Linear without bias -> norm is scale invariant, so dL/dW(c W) = dL/dW(W) / c
    g1 = bn_init.gradient_norms_at_init(norm, 1.0, seed=1, depth=4, data=data)
    g2 = bn_init.gradient_norms_at_init(norm, 2.0, seed=1, depth=4, data=data)
    assert g1.shape == (4,)
    np.testing.assert_allclose(g2, g1 / 2, rtol=1e-3)


def test_unnormalized_gradients_explode_and_vanish_with_scale(data):
    g = {s: bn_init.gradient_norms_at_init("none", s, seed=0, depth=6, data=data)
         for s in (0.5, 1.0, 2.0)}
    assert np.all(g[0.5] < 0.1 * g[1.0]) and np.all(g[2.0] > 10 * g[1.0])


def test_gradient_table_shape_determinism_and_global_rng(data):
    torch.manual_seed(123)
    expected = torch.rand(3)
    torch.manual_seed(123)
    table = bn_init.gradient_norm_table(("none", "bn"), (1.0,), (0, 1), depth=3, data=data)
    assert torch.equal(torch.rand(3), expected)            # caller's RNG untouched
    assert table.shape == (2, 1, 2, 3)
    again = bn_init.gradient_norm_table(("none", "bn"), (1.0,), (0, 1), depth=3, data=data)
    np.testing.assert_array_equal(table, again)
    assert not np.array_equal(table[:, :, 0], table[:, :, 1])    # seeds differ


def test_init_scale_sweep_is_deterministic(data):
    kwargs = dict(norms=("none", "bn"), scales=(1.0,), seeds=(0,), steps=3, data=data)
    a, b = bn_init.init_scale_sweep(**kwargs), bn_init.init_scale_sweep(**kwargs)
    assert a.accuracy.shape == (2, 1, 1)
    np.testing.assert_array_equal(a.accuracy, b.accuracy)
    assert np.all((0 <= a.accuracy) & (a.accuracy <= 1))
    with pytest.raises(ValueError, match="seeds"):
        bn_init.init_scale_sweep(seeds=())


def test_train_for_steps_counts_steps_and_stops_on_nan():
    x, y = torch.randn(20, 3), torch.randint(0, 2, (20,))
    model = torch.nn.Linear(3, 2)
    opt = torch.optim.SGD(model.parameters(), lr=0.1)
    assert train_for_steps(model, opt, x, y, 7, 4, torch.Generator().manual_seed(0)) == (7, True)
    with torch.no_grad():
        model.weight.fill_(float("nan"))
    assert train_for_steps(model, opt, x, y, 5, 4, torch.Generator().manual_seed(0)) == (0, False)
    with pytest.raises(ValueError, match="batch_size"):
        train_for_steps(model, opt, x, y, 1, 21, torch.Generator())


def test_hybrid_net_shapes_and_arguments():
    net = combinations.HybridNet("bn", "ln")
    assert net(torch.randn(5, 1, 8, 8)).shape == (5, 10)
    assert isinstance(net.block.norm1, combinations.lnn.LayerNorm)
    assert isinstance(combinations.HybridNet("bn", "bn").final_norm, combinations.TokenBatchNorm)
    with pytest.raises(ValueError, match="trunk"):
        combinations.HybridNet("gn", "ln")
    with pytest.raises(ValueError, match="head"):
        combinations.HybridNet("bn", "rms")
    with pytest.raises(ValueError, match="variant"):
        combinations.train_hybrid("LN trunk + BN head")


def test_token_batch_norm_is_batch_norm_over_batch_and_tokens():
    x = torch.randn(3, 5, 4, dtype=torch.float64)
    norm = combinations.TokenBatchNorm(4).double()
    expected = torch.nn.functional.batch_norm(x.reshape(15, 4), None, None, training=True)
    torch.testing.assert_close(norm(x), expected.reshape(3, 5, 4))


def test_ln_head_output_of_a_sample_ignores_its_batch_mates():
    torch.manual_seed(0)
    net = combinations.HybridNet("ln_c", "ln").eval()
    x = torch.randn(4, 1, 8, 8)
    torch.testing.assert_close(net(x)[:1], net(x[:1]))


def test_train_hybrid_is_deterministic(data):
    a = combinations.train_hybrid("BN trunk + LN head", seed=0, steps=2, data=data)
    b = combinations.train_hybrid("BN trunk + LN head", seed=0, steps=2, data=data)
    assert a == b and a["steps"] == 2 and a["finite"]
    sweep = combinations.combination_sweep(("no norm",), (0, 1), steps=1, data=data)
    assert sweep.test_acc.shape == sweep.train_acc.shape == (1, 2)


def test_stored_side_results_have_the_documented_shape():
    doc = side_experiments.load_side_results()
    init = side_experiments.init_scale_result(doc)
    assert init.accuracy.shape == (len(init.norms), len(init.scales), len(init.seeds))
    assert len(init.seeds) >= 5 and init.norms == bn_init.INIT_NORMS
    combo = side_experiments.combination_result(doc)
    assert combo.variants == tuple(combinations.VARIANTS) and len(combo.seeds) >= 5
    assert init.mean().shape == (3, len(init.scales)) and np.all(init.sd() >= 0)


def test_stored_init_scale_run_reproduces(data):
    doc = side_experiments.load_side_results()
    init = side_experiments.init_scale_result(doc)
    i, j = init.norms.index("bn"), init.scales.index(2.0)
    fresh = bn_init.init_scale_accuracy("bn", 2.0, init.seeds[0])   # the seed's own split
    assert abs(fresh - init.accuracy[i, j, 0]) <= TOLERANCE["acc_abs"]


def test_load_side_results_names_the_command(tmp_path):
    with pytest.raises(FileNotFoundError, match="side_experiments"):
        side_experiments.load_side_results(tmp_path / "missing.json")


def test_cli_refuses_to_replace_a_file_without_force(tmp_path, capsys):
    out = tmp_path / "side.json"
    out.write_text("{}")
    assert side_experiments.main(["--out", str(out)]) == 2
    assert "--force" in capsys.readouterr().err
    assert out.read_text() == "{}"


def test_side_verdict_rows_pair_the_seeds():
    from layernorm_tutorial.lab.evidence import analysis
    from layernorm_tutorial.lab.evidence.bn_init import InitScaleResult
    from layernorm_tutorial.lab.evidence.combinations import CombinationResult

    seeds = (0, 1, 2, 3, 4)
    acc = np.zeros((2, 2, 5))
    acc[0] = [[0.1, 0.11, 0.12, 0.1, 0.1], [0.1, 0.1, 0.1, 0.1, 0.1]]            # none
    acc[1] = [[0.9, 0.91, 0.92, 0.9, 0.9], [0.1, 0.1, 0.11, 0.1, 0.1]]           # bn
    init = InitScaleResult(("none", "bn"), (0.5, 2.0), seeds, acc)
    test = np.array([[0.95, 0.96, 0.97, 0.95, 0.96], [0.95, 0.96, 0.97, 0.95, 0.96],
                     [0.90, 0.91, 0.90, 0.92, 0.91]])
    combo = CombinationResult(("BN trunk + LN head", "BN everywhere", "LN everywhere"),
                              seeds, test, test)
    rows = analysis.side_verdict_rows(init, combo)
    # scale 2: BN and none within 0.2 pts on every seed -> too small to matter;
    # the combination ties BN everywhere exactly (too small to matter), beats LN everywhere
    assert [r["word"] for r in rows] == ["holds", "too small to matter",
                                         "too small to matter", "holds"]
    assert rows[0]["result"] == "holds: +80.0 pts [+80.0, +80.0], n = 5"
    assert rows[2]["figure"] == "fig-evidence-combinations"
    with pytest.raises(ValueError, match="at least 5 seeds"):
        analysis.side_verdict_rows(
            InitScaleResult(("none", "bn"), (0.5, 2.0), (0, 1, 2), acc[..., :3]), combo)
