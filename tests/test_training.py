"""Tests for layernorm_tutorial.lab.common.training (kept tiny: a few epochs of a shallow MLP)."""

import pytest
import torch

from layernorm_tutorial import nn as ltnn
from layernorm_tutorial.lab.common.training import (
    compare_layer_norm,
    load_digits_split,
    make_mlp,
    train_classifier,
)


@pytest.fixture(scope="module")
def data():
    return load_digits_split(seed=0)


def test_split_is_seeded_and_scaled(data):
    again = load_digits_split(seed=0)
    assert torch.equal(data.y_test, again.y_test)
    assert len(data.y_train) + len(data.y_test) == 1797
    assert data.x_train.dtype == torch.float32 and data.x_train.shape[1] == 64
    assert 0.0 <= data.x_train.min() and data.x_train.max() <= 1.0
    with pytest.raises(ValueError, match="test_fraction"):
        load_digits_split(test_fraction=1.5)


def test_make_mlp_structure_and_identical_init():
    plain = make_mlp(3, 16, layer_norm=False, seed=1)
    normed = make_mlp(3, 16, layer_norm=True, seed=1)
    assert sum(isinstance(m, ltnn.LayerNorm) for m in normed) == 3
    assert not any(isinstance(m, ltnn.LayerNorm) for m in plain)
    linears_plain = [m for m in plain if isinstance(m, torch.nn.Linear)]
    linears_normed = [m for m in normed if isinstance(m, torch.nn.Linear)]
    assert len(linears_plain) == 4
    for a, b in zip(linears_plain, linears_normed, strict=True):
        assert torch.equal(a.weight, b.weight)
    assert make_mlp(2, 8, layer_norm=True)(torch.randn(5, 64)).shape == (5, 10)
    with pytest.raises(ValueError, match="depth"):
        make_mlp(0, layer_norm=True)


def test_he_init_keeps_the_signal_and_default_init_shrinks_it():
    x = torch.randn(256, 64)

    def last_hidden_rms(model):
        with torch.no_grad():
            return model[:-1](x).pow(2).mean().sqrt().item()

    default = last_hidden_rms(make_mlp(8, 64, layer_norm=False, seed=0))
    he = last_hidden_rms(make_mlp(8, 64, layer_norm=False, seed=0, he_init=True))
    assert he > 10 * default
    he_model = make_mlp(2, 64, layer_norm=False, he_init=True)
    assert torch.all(he_model[0].bias == 0)


def test_training_lowers_the_loss_and_is_reproducible(data):
    model = make_mlp(2, 32, layer_norm=True)
    first = train_classifier(model, data, epochs=3, lr=0.05)
    second = train_classifier(make_mlp(2, 32, layer_norm=True), data, epochs=3, lr=0.05)
    assert len(first.train_loss) == len(first.test_loss) == 3
    assert first.train_loss[-1] < first.train_loss[0]
    assert first.train_loss == second.train_loss
    # the reported accuracy is the trained model's share of correct test predictions ...
    model.eval()
    with torch.no_grad():
        correct = (model(data.x_test).argmax(1) == data.y_test).double().mean().item()
    assert first.test_accuracy == pytest.approx(correct, abs=1e-12)
    # ... and three epochs learn far more than chance (1 in 10 classes)
    assert first.test_accuracy > 0.5
    with pytest.raises(ValueError, match="epochs"):
        train_classifier(make_mlp(1, layer_norm=False), data, epochs=0)


def test_compare_returns_both_runs(data):
    runs = compare_layer_norm(data, depth=2, width=16, epochs=1)
    assert set(runs) == {"without LayerNorm", "with LayerNorm"}
    assert all(len(r.train_loss) == 1 for r in runs.values())


def test_validation_split_never_touches_the_fixed_test_set():
    from layernorm_tutorial.lab.common.training import load_digits_with_validation

    fixed = load_digits_split(0.25, seed=0)
    a, b = load_digits_with_validation(2), load_digits_with_validation(3)
    assert (len(a.y_train), len(a.y_val), len(a.y_test)) == (1078, 270, 449)
    for split in (a, b):  # the same test images for every seed ...
        assert torch.equal(split.x_test, fixed.x_test)
    # ... and no validation or training image is a test image
    test_rows = {tuple(r.tolist()) for r in fixed.x_test}
    outside = {tuple(r.tolist()) for r in fixed.x_train}
    for x in (a.x_val, a.x_train, b.x_val):
        assert all(tuple(r.tolist()) in outside for r in x)
    assert not torch.equal(a.y_val, b.y_val)  # the seed draws the train/validation split
    assert len(test_rows) > 0
    with pytest.raises(ValueError, match="seed"):
        load_digits_with_validation(-1)


def test_provenance_line_names_the_machine_or_says_it_is_missing():
    from layernorm_tutorial.lab.common.training import provenance_line

    doc = {"command": "python -m x", "versions": {"torch": "2.13"}}
    assert provenance_line(doc) == "python -m x, torch 2.13; machine not recorded"
    doc["machine"] = {"cpu": "CPU X", "cpu_capability": "AVX2", "mkl": "2024",
                      "torch_threads": 1, "environment": {"MKL_CBWR": "COMPATIBLE"},
                      "date": "2026-11-26T09:15:08+00:00", "commit": "abcdef123"}
    line = provenance_line(doc)
    assert "CPU X (AVX2, MKL 2024, 1 threads, MKL_CBWR=COMPATIBLE)" in line
    assert "2026-11-26 09:15 UTC, commit abcdef1" in line
    assert max(len(part) for part in line.splitlines()) <= 80
