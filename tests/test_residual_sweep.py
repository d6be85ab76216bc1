"""The residual chapter's stored runs: the schedules and controls are what the chapter says,
the runs are those of the documented training function, and the stored file is complete."""

import numpy as np
import pytest

from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.common.verdict import MIN_SEEDS
from layernorm_tutorial.lab.residual import __main__ as sweep_cli
from layernorm_tutorial.lab.residual import experiments, sweep


def test_controls_are_fixed_by_the_warmup_schedule():
    rates = sweep.schedule_rates(sweep.PEAK_LR, sweep.WARMUP_STEPS)
    assert rates[0] == pytest.approx(sweep.PEAK_LR / sweep.WARMUP_STEPS)
    assert rates[sweep.WARMUP_STEPS - 1:] == pytest.approx(sweep.PEAK_LR)
    # same total step size as the warm-up, but constant
    mean_lr, mean_warmup = sweep.SCHEDULES["constant, warm-up's mean rate"]
    assert mean_warmup == 0 and mean_lr * sweep.STEPS == pytest.approx(rates.sum())
    assert sweep.SCHEDULES["constant, warm-up's first rate"] == (pytest.approx(rates[0]), 0)


def test_stored_run_is_the_documented_training_run():
    doc = sweep.run_sweep(seeds=(0,), depths=(2,), schedule_layers=2,
                          schedules=("no warm-up",))
    assert [(r["arrangement"], r["layers"]) for r in doc["runs"]] == [("post-LN", 2),
                                                                       ("pre-LN", 2)]
    run = doc["runs"][0]
    direct = experiments.train_reverse_task(2, False, steps=sweep.STEPS, lr=sweep.PEAK_LR,
                                            warmup_steps=0, **sweep.TASK, seed=0)
    np.testing.assert_allclose(run["loss"], direct["loss"], rtol=1e-6)
    assert run["accuracy"] == pytest.approx(direct["accuracy"])
    assert np.shape(run["grad_norm"]) == (sweep.STEPS, 2) and len(run["first_update_ratio"]) == 2


def test_verdict_orientation_lower_loss_wins():
    v = sweep.verdict(np.array([1.0, 1.1, 1.2, 1.0, 1.1]), np.array([2.0, 2.1, 2.0, 2.1, 2.0]))
    assert v.word == "holds" and v.effect > 0.8
    assert sweep.verdict(np.full(5, 2.0) + np.arange(5) * 0.01, np.full(5, 1.0)).word == \
        "contradicted"


def test_unknown_schedule_is_named():
    with pytest.raises(ValueError, match="schedules must be names"):
        sweep.run_sweep(schedules=("cosine",))


def test_committed_file_has_every_arm_on_every_seed():
    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    assert doc["command"] == sweep.COMMAND and doc["config"]["threshold_nats"] == sweep.THRESHOLD
    seeds = doc["config"]["seeds"]
    assert len(seeds) >= MIN_SEEDS
    for arrangement in sweep.ARRANGEMENTS:
        for schedule in sweep.SCHEDULES:
            runs = sweep.select(doc, arrangement, sweep.SCHEDULE_LAYERS, schedule)
            assert [r["seed"] for r in runs] == sorted(seeds)
        for layers in sweep.DEPTHS:
            losses = sweep.final_losses(doc, arrangement, layers, "no warm-up")
            assert losses.shape == (len(seeds),) and np.isfinite(losses).all()


def test_cli_refuses_before_any_run(tmp_path, capsys):
    existing = tmp_path / "r.json"
    existing.write_text("{}")
    with pytest.raises(SystemExit):
        sweep_cli.main(["--out", str(existing)])
    assert "--force" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        sweep_cli.main(["--out", str(tmp_path)])
    assert "is a folder" in capsys.readouterr().err


def test_held_out_r2_of_a_linear_map_and_of_noise():
    import torch

    g = torch.Generator().manual_seed(0)
    x = torch.randn(3000, 8, generator=g, dtype=torch.float64)
    y = x @ torch.randn(8, 3, generator=g, dtype=torch.float64) + 1.0
    assert experiments._held_out_r2(x, y, 2000) == pytest.approx(1.0, abs=1e-9)
    noise = torch.randn(3000, 3, generator=g, dtype=torch.float64)
    assert abs(experiments._held_out_r2(x, noise, 2000)) < 0.03


def test_input_probe_sees_the_skip_path_and_the_remixing():
    plain = experiments.input_probe_by_depth(depth=3, width=16, batch_size=8,
                                             architecture="plain", n_fit=600, n_test=300)
    res = experiments.input_probe_by_depth(depth=3, width=16, batch_size=8,
                                           architecture="residual", n_fit=600, n_test=300)
    assert plain["probe_r2"].shape == plain["input_correlation"].shape == (4,)
    assert plain["probe_r2"][0] == 1.0
    # one plain block: coordinates decorrelated, but much of the input linearly recoverable
    assert abs(plain["input_correlation"][1]) < 0.2 < 0.3 < plain["probe_r2"][1]
    assert res["probe_r2"][1] > plain["probe_r2"][1]
    with pytest.raises(ValueError, match="n_fit"):
        experiments.input_probe_by_depth(width=16, n_fit=10)
    with pytest.raises(ValueError, match="architecture"):
        experiments.input_probe_by_depth(architecture="dense")


def test_reverse_task_steps_reports_every_loss_and_stops_when_asked():
    import torch

    from layernorm_tutorial.lab.common.transformer import TokenTransformer

    torch.manual_seed(0)
    model = TokenTransformer(5, 5, 4, 1, 8, 2, 16, norm_first=True)
    optimizer = torch.optim.Adam(model.parameters(), lr=1e-2)
    schedule = torch.optim.lr_scheduler.LambdaLR(optimizer, lambda step: 1.0)
    seen = []
    losses = experiments.reverse_task_steps(
        model, optimizer, schedule, steps=10, batch_size=4, seq_len=4, vocab_size=5,
        generator=torch.Generator().manual_seed(1),
        after_step=lambda loss: seen.append(loss) or len(seen) == 3)
    assert losses == seen and len(losses) == 3 and all(np.isfinite(losses))
    assert schedule.last_epoch == 3  # the schedule stepped once per optimizer step
