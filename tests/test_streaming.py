"""Online learning at batch size 1: LN trains, BN in training mode refuses, bookkeeping is right."""

import numpy as np
import pytest
import torch

from layernorm_tutorial.lab.common.training import DigitsData, load_digits_split
from layernorm_tutorial.lab.ln_vs_bn import streaming


def _tiny_data(n_train=60, n_test=30, seed=0):
    g = torch.Generator().manual_seed(seed)
    centers = torch.randn(3, 8, generator=g) * 3
    y = torch.randint(0, 3, (n_train + n_test,), generator=g)
    x = centers[y] + torch.randn(n_train + n_test, 8, generator=g)
    return DigitsData(x[:n_train], y[:n_train], x[n_train:], y[n_train:])


def test_layer_norm_learns_from_a_stream_of_single_samples():
    data = _tiny_data(n_train=300, n_test=100)
    model = streaming.stream_mlp("layernorm", hidden=16, in_features=8, classes=3)
    run = streaming.train_on_stream(model, data, lr=1e-2, window=100)
    assert list(run["checkpoints"]) == [100, 200, 300]
    assert run["prequential_accuracy"].shape == (3,)
    assert run["test_accuracy"][-1] > 0.9  # three well-separated clusters


def test_batch_norm_cannot_train_on_one_sample():
    model = streaming.stream_mlp("batchnorm", hidden=16, in_features=8, classes=3)
    with pytest.raises(ValueError, match="more than 1 value per channel"):
        streaming.train_on_stream(model, _tiny_data(), window=10)


def test_prediction_comes_before_the_update():
    # with a vanishing learning rate the prequential score is the fixed model's accuracy
    data = _tiny_data(n_train=40)
    model = streaming.stream_mlp("none", hidden=16, in_features=8, classes=3, seed=2)
    with torch.no_grad():
        expected = (model(data.x_train).argmax(1) == data.y_train).double().mean().item()
    run = streaming.train_on_stream(model, data, lr=1e-30, window=40)
    assert run["prequential_accuracy"][0] == pytest.approx(expected)


def test_same_initial_weights_for_every_norm_and_global_rng_untouched():
    torch.manual_seed(5)
    expected = torch.rand(2)
    torch.manual_seed(5)
    ln_model = streaming.stream_mlp("layernorm", seed=1)
    bn_model = streaming.stream_mlp("batchnorm", seed=1)
    assert torch.equal(torch.rand(2), expected)
    assert torch.equal(ln_model[0].weight, bn_model[0].weight)
    assert torch.equal(ln_model[3].weight, bn_model[3].weight)


def test_deterministic_and_order_depends_on_seed():
    data = _tiny_data()
    runs = [streaming.train_on_stream(streaming.stream_mlp("layernorm", hidden=8,
                                                           in_features=8, classes=3),
                                      data, seed=s, window=20)["test_accuracy"]
            for s in (0, 0, 1)]
    np.testing.assert_array_equal(runs[0], runs[1])
    assert runs[0].shape == runs[2].shape == (3,)


@pytest.mark.parametrize(("kwargs", "match"), [({"lr": 0.0}, "lr"), ({"window": 0}, "window")])
def test_bad_arguments(kwargs, match):
    model = streaming.stream_mlp("none", in_features=8, classes=3)
    with pytest.raises(ValueError, match=match):
        streaming.train_on_stream(model, _tiny_data(), **kwargs)


def test_unknown_norm_named():
    with pytest.raises(ValueError, match="norm must be one of"):
        streaming.stream_mlp("groupnorm")


def test_digits_stream_shapes():
    data = load_digits_split()
    run = streaming.train_on_stream(streaming.stream_mlp("layernorm"), data, window=674)
    assert list(run["checkpoints"]) == [674, 1348] and run["test_accuracy"].shape == (2,)


# --- float64 runs and the check against the stored numerics-path measurement -------------

def test_float64_run_and_logits():
    data = _tiny_data()

    def model():
        return streaming.stream_mlp("layernorm", hidden=16, in_features=8, classes=3)

    run = streaming.train_on_stream(model(), data, window=20, dtype=torch.float64)
    assert run["test_logits"].dtype == np.float64 and run["test_logits"].shape == (30, 3)
    again = streaming.train_on_stream(model(), data, window=20)
    assert again["test_logits"].dtype == np.float32    # default: the model's own dtype


def _fake_runs(acc=0.5, logit=1.0):
    run = {"prequential_accuracy": [acc, acc], "test_accuracy": [acc, acc],
           "test_logits": [[logit] * 10] * streaming.HEAD_IMAGES}
    return {"layernorm": [run], "none": [run]}


def _doc(spread=1e-11):
    kept = {"prequential_accuracy": [0.5, 0.5], "test_accuracy": [0.5, 0.5],
            "logits_head": [1.0] * (10 * streaming.HEAD_IMAGES)}
    return {"online": {"values": {"native": {"layernorm": [kept], "none": [kept]},
                                  "avx2": {"layernorm": [kept], "none": [kept]}},
                       "relative_spread": spread}}


def test_check_against_stored_uses_the_measured_spread():
    check = streaming.check_against_stored(_fake_runs(logit=1.0 + 5e-11), _doc())
    assert check.passed and check.tolerance == pytest.approx(1e-10) and check.paths == 2
    assert "2 numerics paths" in check.text()
    with pytest.raises(AssertionError, match="logit gap"):
        streaming.check_against_stored(_fake_runs(logit=1.0 + 1e-9), _doc())
    with pytest.raises(AssertionError, match="accuracies equal False"):
        streaming.check_against_stored(_fake_runs(acc=0.5 + 1 / 449), _doc())


def test_online_table_and_glue_values():
    runs = {"layernorm": [{"prequential_accuracy": [0.5, 0.9], "test_accuracy": [0.8, 0.91]},
                          {"prequential_accuracy": [0.6, 0.8], "test_accuracy": [0.8, 0.95]}],
            "none": [{"prequential_accuracy": [0.5, 0.9], "test_accuracy": [0.8, 0.9]}]}
    table = streaming.online_table(runs)
    assert max(len(line) for line in table.splitlines()) <= 80
    assert "layernorm     1        0.600        0.800          0.950" in table
    values = streaming.online_glue(runs)
    assert values == {"online_ln_first": "0.55", "online_ln_last": "0.85",
                      "online_ln_test": "0.91–0.95", "online_none_test": "0.90–0.90"}


def test_committed_measurement_covers_every_path_and_agrees():
    from layernorm_tutorial.lab.common import numerics_paths
    from layernorm_tutorial.lab.common.stored_results import load_results

    doc = load_results(streaming.PATHS_FILE)
    assert doc["command"] == streaming.PATHS_COMMAND and doc["config"]["float64"] is True
    record = doc["online"]
    assert set(record["values"]) == set(numerics_paths.PATHS)
    assert record["relative_spread"] < 1e-8          # float64: far below 3 printed digits
    native = record["values"]["native"]
    for other in record["values"].values():          # accuracies identical on every path
        for norm in native:
            for a, b in zip(native[norm], other[norm], strict=True):
                assert a["test_accuracy"] == b["test_accuracy"]
                assert a["prequential_accuracy"] == b["prequential_accuracy"]
