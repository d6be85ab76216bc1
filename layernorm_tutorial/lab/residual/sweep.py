"""The residual chapter's training runs on five seeds, judged by the book's verdict method.

The toy task (:func:`~.experiments.reverse_task_batch`): sequences of ``SEQ_LEN`` random
tokens from a vocabulary of ``VOCAB_SIZE``, to be output reversed, one prediction per
position; a :class:`~layernorm_tutorial.lab.common.transformer.TokenTransformer` of width
``D_MODEL`` with ``NHEAD`` heads and feed-forward size ``DIM_FEEDFORWARD`` is trained with Adam
for ``STEPS`` steps on a fresh batch of ``BATCH_SIZE`` sequences per step
(:func:`~.warmup.early_training_trace`). The metric of a run is its mean training loss over the
last ``LAST`` steps (nats; chance is ``ln VOCAB_SIZE``); lower is better.

Two experiments, every arm on the same ``SEEDS`` (seed ``s`` fixes the initialization and
the batches, so the arms pair up by seed):

* **schedules** (12 blocks, post-LN and pre-LN): the peak rate ``PEAK_LR`` without warm-up;
  a linear warm-up to it over ``WARMUP_STEPS`` steps; and two constant-rate controls fixed
  by the warm-up schedule itself, not tuned: its *mean* rate over the run (the same total
  step size as the warm-up) and its *first* rate (``PEAK_LR / WARMUP_STEPS``).
* **depth** (6, 12 and 24 blocks, post-LN and pre-LN, ``PEAK_LR``, no warm-up; the 12-block
  runs are those of the schedules experiment).

No hyperparameter is chosen from these runs: the rates are the conditions the chapter's
questions are about. The verdicts use :func:`~layernorm_tutorial.lab.common.verdict.
paired_verdict` through the claims registry (``residual.warm-up``, ``residual.depth``:
``THRESHOLD`` nats).

``python -m layernorm_tutorial.lab.residual`` runs both and writes
``book/data/residual_runs.json`` (:data:`COMMITTED_PATH`); the chapter reads that file.
"""

from __future__ import annotations

import math

import numpy as np

from layernorm_tutorial.lab.common import claims, stored_results
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance
from layernorm_tutorial.lab.common.verdict import Verdict, family_marks
from layernorm_tutorial.lab.residual.experiments import warmup_factor

__all__ = ["ARRANGEMENTS", "COMMITTED_PATH", "DEPTHS", "SCHEDULES", "SEEDS", "THRESHOLD",
           "all_verdicts", "depth_verdicts", "final_losses", "retrain_losses", "run_sweep",
           "family", "schedule_rates", "schedule_verdicts", "verdict"]

VOCAB_SIZE, SEQ_LEN, BATCH_SIZE = 8, 6, 32
D_MODEL, NHEAD, DIM_FEEDFORWARD = 32, 2, 64
STEPS, LAST = 30, 5
PEAK_LR, WARMUP_STEPS = 1e-2, 10
SEEDS = (0, 1, 2, 3, 4)
DEPTHS = (6, 12, 24)
CLAIMS = ("residual.warm-up", "residual.depth")
THRESHOLD = claims.threshold("residual.depth")  # nats of training loss, in the registry
ARRANGEMENTS = {"post-LN": False, "pre-LN": True}
COMMITTED_PATH = BOOK_DATA / "residual_runs.json"
COMMAND = "python -m layernorm_tutorial.lab.residual"
TASK = dict(d_model=D_MODEL, nhead=NHEAD, dim_feedforward=DIM_FEEDFORWARD, seq_len=SEQ_LEN,
            vocab_size=VOCAB_SIZE, batch_size=BATCH_SIZE)


def schedule_rates(lr: float, warmup_steps: int, steps: int = STEPS) -> np.ndarray:
    """The rate used at each step: ``lr * warmup_factor(t, warmup_steps)``, shape ``(steps,)``."""
    return np.array([lr * warmup_factor(t, warmup_steps) for t in range(steps)])


MEAN_RATE = float(schedule_rates(PEAK_LR, WARMUP_STEPS).mean())
FIRST_RATE = PEAK_LR / WARMUP_STEPS
# name -> (constant or peak rate, warm-up steps)
SCHEDULES = {"no warm-up": (PEAK_LR, 0),
             "warm-up": (PEAK_LR, WARMUP_STEPS),
             "constant, warm-up's mean rate": (MEAN_RATE, 0),
             "constant, warm-up's first rate": (FIRST_RATE, 0)}


def retrain_losses(arrangement: str, layers: int, schedule: str, seed: int) -> list[float]:
    """The loss curve of one stored run, trained again in this process (JSON-able; the
    target of ``run_on_paths``)."""
    return _trace((arrangement, layers, schedule, seed))["loss"]


def _trace(job: tuple) -> dict:
    """One run: ``job = (arrangement, layers, schedule, seed)``; single-threaded."""
    import torch

    from layernorm_tutorial.lab.residual.warmup import early_training_trace

    arrangement, layers, schedule, seed = job
    torch.set_num_threads(1)
    lr, warmup_steps = SCHEDULES[schedule]
    t = early_training_trace(layers, ARRANGEMENTS[arrangement], steps=STEPS, lr=lr,
                             warmup_steps=warmup_steps, probe_steps=1, seed=seed, **TASK)
    return {"arrangement": arrangement, "layers": layers, "schedule": schedule, "seed": seed,
            "loss": t["loss"].tolist(), "accuracy": t["accuracy"],
            "grad_norm": t["grad_norm"].tolist(),  # (steps, layers)
            "first_update_ratio": t["update_ratio"][0].tolist(),  # (layers,)
            "first_output_change": float(t["output_change"][0])}


SCHEDULE_LAYERS = 12


def _jobs(seeds, depths, schedules, schedule_layers) -> list:
    jobs = [(a, schedule_layers, s, seed) for a in ARRANGEMENTS for s in schedules
            for seed in seeds]
    jobs += [(a, d, "no warm-up", seed) for a in ARRANGEMENTS for d in depths
             if d != schedule_layers for seed in seeds]
    return jobs


def run_sweep(*, seeds=SEEDS, depths=DEPTHS, schedules=tuple(SCHEDULES),
              schedule_layers: int = SCHEDULE_LAYERS, workers: int = 1) -> dict:
    """Every run of both experiments; returns ``{"runs": [...]}`` (see :func:`_trace`).

    The schedules experiment uses ``schedule_layers`` blocks; the depth experiment reuses its
    "no warm-up" runs at that depth and adds the other ``depths``.
    """
    stored_results.require_known_names(schedules, SCHEDULES, "schedules")
    jobs = _jobs(seeds, depths, schedules, schedule_layers)
    return {"runs": stored_results.run_jobs(_trace, jobs, workers,
                                            desc="residual: schedules and depths")}


def build_document(sweep: dict, seconds: float | None, seeds=SEEDS) -> dict:
    config = {"task": {"vocab_size": VOCAB_SIZE, "seq_len": SEQ_LEN, "batch_size": BATCH_SIZE,
                       "fresh batch every step": True},
              "model": {"d_model": D_MODEL, "nhead": NHEAD, "dim_feedforward": DIM_FEEDFORWARD,
                        "final LN": "pre-LN only"},
              "optimizer": "Adam (torch defaults)", "steps": STEPS,
              "metric": f"mean training loss over the last {LAST} steps (nats)",
              "schedules": {k: {"lr": v[0], "warmup_steps": v[1]} for k, v in SCHEDULES.items()},
              "seeds": list(seeds), "threshold_nats": THRESHOLD, "threads_per_run": 1}
    return claims.stamp({**provenance(COMMAND, config, seconds), **sweep}, CLAIMS)


def select(doc: dict, arrangement: str, layers: int, schedule: str) -> list[dict]:
    """The runs of one arm, in increasing seed order."""
    runs = [r for r in doc["runs"] if r["arrangement"] == arrangement
            and r["layers"] == layers and r["schedule"] == schedule]
    if not runs:
        raise ValueError(f"no runs for {arrangement}, {layers} blocks, {schedule!r}")
    return sorted(runs, key=lambda r: r["seed"])


def final_losses(doc: dict, arrangement: str, layers: int, schedule: str) -> np.ndarray:
    """Per seed, the mean loss over the last ``LAST`` steps."""
    return np.array([np.mean(r["loss"][-LAST:]) for r in select(doc, arrangement, layers,
                                                                  schedule)])


def stacked(doc: dict, arrangement: str, layers: int, schedule: str, key: str) -> np.ndarray:
    """``key`` of every seed's run stacked along a new first axis."""
    return np.array([r[key] for r in select(doc, arrangement, layers, schedule)])


def verdict(claimed: np.ndarray, baseline: np.ndarray, claim: str = "",
            claim_id: str = "residual.depth") -> Verdict:
    """"``claimed`` reaches a lower loss than ``baseline``" by at least the registered
    threshold (``THRESHOLD`` nats), judged through the claims registry."""
    return claims.judge(claim_id, claimed, baseline, setting=claim)


def chance_loss() -> float:
    return math.log(VOCAB_SIZE)


def schedule_verdicts(doc: dict, layers: int = SCHEDULE_LAYERS) -> dict[tuple[str, str], Verdict]:
    """``{(arrangement, other schedule): "warm-up reaches a lower loss than <other>"}``."""
    out = {}
    for name in ARRANGEMENTS:
        mine = final_losses(doc, name, layers, "warm-up")
        for other in SCHEDULES:
            if other != "warm-up":
                out[(name, other)] = verdict(mine, final_losses(doc, name, layers, other),
                                             claim=f"{name}: warm-up vs {other}",
                                             claim_id="residual.warm-up")
    return out


def depth_verdicts(doc: dict, depths=DEPTHS) -> dict[int, Verdict]:
    """``{layers: "pre-LN reaches a lower loss than post-LN"}`` without warm-up."""
    return {layers: verdict(final_losses(doc, "pre-LN", layers, "no warm-up"),
                            final_losses(doc, "post-LN", layers, "no warm-up"),
                            claim=f"{layers} blocks")
            for layers in depths}


def all_verdicts(doc: dict) -> dict[str, Verdict]:
    """Every verdict of the chapter, by a short label (schedules first, then depths)."""
    out = {f"{name}, warm-up vs {other}": v
           for (name, other), v in schedule_verdicts(doc).items()}
    out.update({f"{layers} blocks, pre-LN vs post-LN": v
                for layers, v in depth_verdicts(doc).items()})
    return out


def family(doc: dict) -> dict[str, tuple[Verdict, bool]]:
    """The chapter's family (:func:`all_verdicts`): ``{label: (verdict, survives the
    family's Bonferroni correction)}`` (:func:`~layernorm_tutorial.lab.common.verdict.
    family_marks`)."""
    judged = all_verdicts(doc)
    marks = family_marks(list(judged.values()))
    return {k: (v, m) for (k, v), m in zip(judged.items(), marks, strict=True)}
