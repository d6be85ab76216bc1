"""Train the registered confirmatory plans and build their results files.

One function per plan (:data:`PLANS`): each trains the runs of its claims on the registered
fresh seeds (:func:`~layernorm_tutorial.lab.common.claims.confirmation`), with the earlier
run's hyperparameters where the registration keeps them, and returns a JSON-ready document
in the same layout as the chapter's earlier results file (so the chapter's own judging
functions read it) plus the full provenance: the command, the versions, the machine
(:func:`~layernorm_tutorial.lab.common.numerics_paths.machine_info`), the date and commit
when the runs *started* (``started``) and when the file was written (``machine.date``), and
the hashes of the confirmatory definitions they are judged under
(:func:`~layernorm_tutorial.lab.common.claims.stamp_confirmatory`).
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable

import numpy as np

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.numerics_paths import machine_info
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance, run_jobs

__all__ = ["PLANS", "COMMAND", "plan_claims", "plan_path", "plan_seeds", "earlier_document",
           "run_plan"]

COMMAND = "python -m layernorm_tutorial.lab.confirmatory"


def plan_claims(plan: str) -> tuple[str, ...]:
    """The claim ids whose confirmation the plan ``plan`` runs (one results file each)."""
    if plan not in PLANS:
        raise ValueError(f"plan must be one of {sorted(PLANS)}, got {plan!r}")
    results = PLANS[plan][0]
    return tuple(c.claim_id for c in claims.CONFIRMATIONS if c.results == results)


def plan_path(plan: str):
    """The plan's results file in ``book/data``."""
    plan_claims(plan)
    return BOOK_DATA / PLANS[plan][0]


def plan_seeds(plan: str) -> tuple[tuple[int, ...], tuple[int, ...]]:
    """``(tuning seeds, reported seeds)`` registered for the plan (the same for all its
    claims; ``ValueError`` otherwise)."""
    confs = {(c.tuning_seeds, c.seeds) for c in map(claims.confirmation, plan_claims(plan))}
    if len(confs) != 1:
        raise ValueError(f"plan {plan!r}: its claims register different seeds {sorted(confs)}")
    return confs.pop()


def earlier_document(name: str) -> dict:
    """The earlier (exploratory) results file ``book/data/<name>``, whose tuned
    hyperparameters a confirmation keeps."""
    return json.loads((BOOK_DATA / name).read_text())


def _header(plan: str, config: dict, seconds: float, started: dict, tiny: bool) -> dict:
    command = f"{COMMAND} {plan}" + (" --tiny" if tiny else "")
    doc = provenance(command, {**config, "tiny": tiny}, seconds)
    doc["started"] = {"date": started["date"], "commit": started["commit"]}
    doc["registration"] = {cid: {"seeds": list(claims.confirmation(cid).seeds),
                                 "tuning_seeds": list(claims.confirmation(cid).tuning_seeds),
                                 "hyperparameters": claims.confirmation(cid).hyperparameters}
                           for cid in plan_claims(plan)}
    return doc


# ---- evidence: the side experiments -----------------------------------------------------

def _side_job(job: tuple) -> float:
    import torch

    torch.set_num_threads(1)
    if job[0] == "init":
        from layernorm_tutorial.lab.evidence.bn_init import init_scale_accuracy

        _, norm, scale, seed = job
        return init_scale_accuracy(norm, scale, seed)
    from layernorm_tutorial.lab.evidence.combinations import train_hybrid

    _, variant, seed = job
    run = train_hybrid(variant, seed)
    return [run["test_acc"], run["train_acc"]]


def _evidence_side(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.evidence.bn_init import INIT_NORMS
    from layernorm_tutorial.lab.evidence.combinations import VARIANTS
    from layernorm_tutorial.lab.evidence.side_experiments import DIGITS

    earlier = earlier_document("evidence_side_results.json")
    norms = list(earlier["init_scale"]["norms"]) if not tiny else ["none", "bn"]
    scales = list(earlier["init_scale"]["scales"]) if not tiny else [0.5, 2.0]
    variants = list(earlier["combinations"]["variants"])
    if not set(norms) <= set(INIT_NORMS) or not set(variants) <= set(VARIANTS):
        raise ValueError("the earlier side results name norms or variants this package lacks")
    jobs = [("init", n, sc, s) for n in norms for sc in scales for s in seeds]
    jobs += [("combo", v, s) for v in variants for s in seeds]
    done = dict(zip(jobs, run_jobs(_side_job, jobs, workers, desc="evidence side"),
                    strict=True))
    acc = np.array([[[done[("init", n, sc, s)] for s in seeds] for sc in scales]
                    for n in norms])
    combo = np.array([[done[("combo", v, s)] for s in seeds] for v in variants])

    def rounded(a):
        return np.vectorize(lambda v: float(f"{v:.{DIGITS}g}"))(a).tolist()

    body = {"data": earlier["data"],
            "init_scale": {"norms": norms, "scales": scales, "seeds": list(seeds),
                           "accuracy": rounded(acc),
                           "settings": earlier["init_scale"]["settings"]},
            "combinations": {"variants": variants, "seeds": list(seeds),
                             "test_acc": rounded(combo[..., 0]),
                             "train_acc": rounded(combo[..., 1]),
                             "settings": earlier["combinations"]["settings"]}}
    return body, {"of": "python -m layernorm_tutorial.lab.evidence.side_experiments",
                  "seeds": list(seeds)}


# ---- residual ------------------------------------------------------------------------------

def _residual(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.residual import sweep

    settings = dict(depths=(2,), schedule_layers=2, schedules=("no warm-up", "warm-up")) \
        if tiny else {}
    result = sweep.run_sweep(seeds=seeds, workers=workers, **settings)
    config = sweep.build_document(result, None, seeds=seeds)["config"]
    return result, {**config, "of": sweep.COMMAND}


# ---- principles -----------------------------------------------------------------------------

def _principles(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.principles import ln_vs_he

    if tuple(tuning) + tuple(seeds) != tuple(range(tuning[0], tuning[0] + len(tuning)
                                                 + len(seeds))):
        raise ValueError("principles: the tuning and reported seeds must be consecutive "
                         "(seed_plan)")
    settings = dict(lr_grid=(0.02,), depth=2, epochs=1) if tiny else {}
    result = ln_vs_he.run_comparison(n_reported=len(seeds), n_tuning=len(tuning),
                                     first_seed=tuning[0], workers=workers, **settings)
    if tuple(result["reported_seeds"]) != tuple(seeds):
        raise RuntimeError("principles: the run used other seeds than the registered ones")
    config = {"lr_grid": list(settings.get("lr_grid", ln_vs_he.LR_GRID)),
              "depth": settings.get("depth", 8), "epochs": settings.get("epochs", 15),
              "n_reported": len(seeds), "n_tuning": len(tuning), "first_seed": tuning[0],
              "threads": 1, "tuning_data": "validation images in no reported seed's test set",
              "of": ln_vs_he.COMMAND}
    return {"threshold": ln_vs_he.THRESHOLD, **result}, config


# ---- rnn ------------------------------------------------------------------------------------

def _rnn(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.rnn import race

    earlier = earlier_document("rnn_race.json")
    selected = {arm: float(lr) for arm, lr in earlier["selected_lr"].items()}
    arms = tuple(race.ARMS) if not tiny else ("RNN", "LN-RNN")
    epochs = race.EPOCHS if not tiny else 1
    jobs = [(a, selected[a], s, "reported", epochs) for a in arms for s in seeds]
    runs = run_jobs(race._train, jobs, workers, desc="rnn race: confirmatory seeds")
    config = {**earlier["config"], "reported_seeds": list(seeds), "epochs": epochs,
              "tuning_seeds": earlier["config"]["tuning_seeds"],
              "lr_rule": "kept: selected_lr of rnn_race.json", "of": race.COMMAND}
    return {"selected_lr": {a: selected[a] for a in arms}, "runs": runs}, config


# ---- evidence: the sweep --------------------------------------------------------------------

def _evidence(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from dataclasses import replace

    from layernorm_tutorial.lab.evidence import experiments as ex
    from layernorm_tutorial.lab.evidence.results import build_results

    earlier = earlier_document("evidence_results.json")
    fixed = {(d["experiment"], d["norm"], d["batch_size"]): d for d in earlier["selected_lr"]}
    exps = ex.tiny_experiments() if tiny else ex.EXPERIMENTS
    ranges = ex.tiny_rate_ranges() if tiny else ex.RATE_RANGES
    exps = tuple(replace(e, reported_seeds=tuple(seeds)) for e in exps)
    ranges = tuple(replace(r, seeds=tuple(seeds)) for r in ranges)
    sweep = ex.run_sweep(exps, workers=workers, progress=True, rate_ranges=ranges,
                         fixed_lr=fixed)
    doc = build_results(sweep, exps, None, rate_ranges=ranges, workers=workers)
    body = {k: v for k, v in doc.items() if k not in ("command", "versions", "config")}
    return body, {**doc["config"], "versions_detail": doc["versions"],
                  "lr_rule": "kept: selected_lr of evidence_results.json (tuning seed 0)",
                  "of": "python -m layernorm_tutorial.lab.evidence"}


# ---- large_models ---------------------------------------------------------------------------

def _lm_job(job: tuple):
    """``("accuracy", norm, lr, seed, alpha_init, steps)`` or ``("deepnorm", arm, seed,
    num_layers, steps, lr, warmup_steps)``; single-threaded."""
    import torch

    torch.set_num_threads(1)
    if job[0] == "accuracy":
        from layernorm_tutorial.lab.large_models import comparisons as cmp

        _, norm, lr, seed, alpha, steps = job
        return cmp.norm_run(norm, lr, seed, steps, alpha_init=alpha)["accuracy"]
    from layernorm_tutorial.lab.large_models import deepnorm

    _, arm, seed, layers, steps, lr, warmup = job
    r = deepnorm.deepnorm_run(arm, layers, seed, steps=steps, lr=lr, warmup_steps=warmup)
    return {"loss": [float(v) for v in r["loss"]], "final_loss": r["final_loss"],
            "accuracy": r["accuracy"]}


def _large_models(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.large_models import comparisons as cmp
    from layernorm_tutorial.lab.large_models import deepnorm
    from layernorm_tutorial.lab.large_models.results import DEEPNORM_SETTINGS

    earlier = earlier_document("large_models_results.json")
    chosen = {n: float(lr) for n, lr in earlier["comparisons"]["main"]["lr"].items()}
    dn = {**DEEPNORM_SETTINGS, "seeds": list(seeds)}
    steps = earlier["comparisons"]["main"]["steps"]
    if tiny:
        dn, steps = {**dn, "num_layers": 2, "steps": 3}, 3
    deep = (dn["num_layers"], dn["steps"], dn["lr"], dn["warmup_steps"])
    jobs = [("accuracy", n, chosen[n], s, 0.5, steps) for n in cmp.NORMS for s in seeds]
    jobs += [("accuracy", "dyt", chosen["dyt"], s, a, steps) for a in cmp.ALPHAS if a != 0.5
             for s in seeds]
    jobs += [("deepnorm", arm, s, *deep) for arm in deepnorm.ARMS for s in seeds]
    done = dict(zip(jobs, run_jobs(_lm_job, jobs, workers, desc="large_models confirmatory"),
                    strict=True))
    accuracy = {n: [done[("accuracy", n, chosen[n], s, 0.5, steps)] for s in seeds]
                for n in cmp.NORMS}
    alpha = {str(a): (accuracy["dyt"] if a == 0.5 else
                      [done[("accuracy", "dyt", chosen["dyt"], s, a, steps)] for s in seeds])
             for a in cmp.ALPHAS}
    body = {"comparisons": {
                "main": {"tuning_seeds": earlier["comparisons"]["main"]["tuning_seeds"],
                         "reported_seeds": list(seeds), "lr": chosen, "accuracy": accuracy,
                         "lr_rule": "kept: comparisons.main.lr of large_models_results.json",
                         "steps": steps},
                "alpha": {"accuracy": alpha, "lr": chosen["dyt"], "seeds": list(seeds)}},
            "deepnorm": {"settings": dn,
                         "runs": {arm: [done[("deepnorm", arm, s, *deep)] for s in seeds]
                                  for arm in deepnorm.ARMS}}}
    return body, {"of": "python -m layernorm_tutorial.lab.large_models",
                  "sections": ["comparisons", "deepnorm"], "deepnorm": dn,
                  "threads per job": 1}


def _qk_job(job: tuple) -> list:
    """``(arm, lr, seed, steps, warmup_steps)``: one run of the QK-norm ladder."""
    import torch

    from layernorm_tutorial.lab.large_models import qk_norm

    torch.set_num_threads(1)
    arm, lr, seed, steps, warmup = job
    r = qk_norm.qk_run(arm, lr, seed, steps=steps, warmup_steps=warmup)
    return {"loss": [float(v) for v in r["loss"]],
            "max_logit": [float(v) for v in r["max_logit"]],
            "final_loss": r["final_loss"], "accuracy": r["accuracy"], "clipped": r["clipped"]}


def _large_models_qk(seeds, tuning, workers: int, tiny: bool) -> tuple[dict, dict]:
    from layernorm_tutorial.lab.large_models.results import QK_SETTINGS

    earlier = earlier_document("large_models_results.json")["qk_norm"]["settings"]
    lrs, steps, warmup = earlier["lrs"], earlier["steps"], earlier["warmup_steps"]
    if (lrs, steps, warmup) != (QK_SETTINGS["lrs"], QK_SETTINGS["steps"],
                                QK_SETTINGS["warmup_steps"]):
        raise ValueError("the stored QK-norm ladder's settings differ from the package's")
    if tiny:
        lrs, steps, warmup = lrs[:2], 3, 1
    arms = ["none", "rmsnorm"]
    jobs = [(arm, lr, s, steps, warmup) for arm in arms for lr in lrs for s in seeds]
    done = dict(zip(jobs, run_jobs(_qk_job, jobs, workers, desc="QK-norm confirmatory"),
                    strict=True))
    settings = {"lrs": list(lrs), "seeds": list(seeds), "steps": steps,
                "warmup_steps": warmup, "arms": arms}
    runs = {arm: {str(lr): [done[(arm, lr, s, steps, warmup)] for s in seeds] for lr in lrs}
            for arm in arms}
    return ({"qk_norm": {"settings": settings, "runs": runs}},
            {"of": "python -m layernorm_tutorial.lab.large_models --sections qk_norm",
             "qk_norm": settings, "threads per job": 1})


#: plan -> (results file, run function); a plan's claims are the confirmations that name
#: its results file.
PLANS: dict[str, tuple[str, Callable]] = {
    "evidence-side": ("evidence_side_confirmatory.json", _evidence_side),
    "residual": ("residual_runs_confirmatory.json", _residual),
    "principles": ("principles_ln_vs_he_confirmatory.json", _principles),
    "rnn": ("rnn_race_confirmatory.json", _rnn),
    "evidence": ("evidence_confirmatory.json", _evidence),
    "large_models": ("large_models_confirmatory.json", _large_models),
    "large_models_qk": ("large_models_qk_confirmatory.json", _large_models_qk),
}


def run_plan(plan: str, workers: int = 1, tiny: bool = False) -> tuple[dict, str]:
    """Train the plan on its registered seeds; return ``(document, summary)``.

    ``tiny``: a seconds-long smoke run with the same seeds (never the book's file: the
    command refuses to write it without ``--out``)."""
    ids = plan_claims(plan)
    tuning, seeds = plan_seeds(plan)
    started = machine_info()
    start = time.perf_counter()
    body, config = PLANS[plan][1](seeds, tuning, workers, tiny)
    seconds = time.perf_counter() - start
    doc = {**_header(plan, {**config, "workers": workers}, seconds, started, tiny), **body}
    doc = claims.stamp_confirmatory(doc, ids)
    return doc, f"{plan}: confirmatory seeds {list(seeds)}, {seconds:.0f} s"
