r"""The principles chapter's training outcomes, stored once and checked live.

Training is chaotic: a difference in the last bit of one reduction (a SIMD width, an MKL
kernel, a thread count) grows, step by step, into a visibly different outcome of the same
seed. So the chapter's two training experiments, the nine-run demonstration (PyTorch's
default initialisation without and with LayerNorm, and He initialisation, three seeds each)
and the init-scale sweep (five scales, two learning rates, with and without LayerNorm, three
seeds: 60 runs), are run once by ``python -m layernorm_tutorial.lab.principles training`` and
stored, with their provenance, in ``book/data/principles_training.json``. The prose quotes the
stored run.

The notebook re-runs a cheap part, the first ``CHECK_EPOCHS`` epoch(s) of all 69 runs
(:func:`first_epochs`), and compares their mean training losses with the stored run's
(:func:`check_live`). The tolerance is *measured*: the command runs the same first epoch on
every numerics path of ``lab.common.numerics_paths`` and stores the spread; the check allows
``TOLERANCE_FACTOR`` times it. The command also stores the full outcome of every path, which
shows how far a seed's final accuracy moves with the arithmetic.

Typical use::

    doc = stored_results.load_results(stored_training.COMMITTED_PATH)
    check = stored_training.check_live(doc)        # raises if this machine disagrees
    demo = stored_training.DemoSummary(doc)        # the table, the glue values
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from layernorm_tutorial.lab.common.stored_results import BOOK_DATA
from layernorm_tutorial.lab.common.training import (
    TrainingResult,
    load_digits_split,
    make_mlp,
)
from layernorm_tutorial.lab.principles.init_sensitivity import (
    InitScaleSweep,
    MLPEnsemble,
    scaled_he_mlp,
    train_ensemble,
)

__all__ = ["COMMAND", "COMMITTED_PATH", "DEMO_ARMS", "DEMO", "SWEEP", "TRAINED_ACCURACY",
           "CHECK_EPOCHS", "TOLERANCE_FACTOR", "TOLERANCE_FLOOR", "per_run_spread", "JOBS",
           "run_job", "full_runs",
           "first_epochs", "final_accuracies", "LiveCheck", "check_live", "compare_first_epochs",
           "demo_results", "sweep_from_document", "DemoSummary", "SweepSummary", "machine_words",
           "paths_table", "paths_trained_scales", "paths_sentence"]

COMMAND = "python -m layernorm_tutorial.lab.principles training"
COMMITTED_PATH = BOOK_DATA / "principles_training.json"

#: The demonstration's three arms, as ``make_mlp`` keyword arguments.
DEMO_ARMS = {"default init": {"layer_norm": False},
             "default init + LayerNorm": {"layer_norm": True},
             "He init": {"layer_norm": False, "he_init": True}}
#: The demonstration: an 8-layer MLP, SGD with momentum at one shared rate, three seeds.
DEMO = {"depth": 8, "lr": 0.02, "epochs": 15, "seeds": (0, 1, 2), "split_seed": 0}
#: The init-scale sweep: hidden weights ``scale`` times He's, two rates, with and without LN.
SWEEP = {"depth": 8, "epochs": 15, "seeds": (0, 1, 2), "split_seed": 0,
         "scales": (0.25, 0.5, 1.0, 2.0, 4.0), "lrs": (0.02, 0.1)}
#: A setting "trains" when every seed reaches this test accuracy.
TRAINED_ACCURACY = 0.8
#: Epochs the notebook re-runs live.
CHECK_EPOCHS = 1
#: The live check allows this many times a run's spread measured across numerics paths ...
TOLERANCE_FACTOR = 10.0
#: ... and at least this relative gap (about float32's unit roundoff, 2**-24 = 6e-8).
TOLERANCE_FLOOR = 1e-7
#: The stored run's jobs: the demonstration, and the sweep by (layer_norm, lr).
JOBS = (("demo",),) + tuple(("sweep", ln, lr) for ln in (False, True) for lr in SWEEP["lrs"])


def _curves(result: TrainingResult) -> dict:
    return {"train_loss": [float(v) for v in result.train_loss],
            "test_loss": [float(v) for v in result.test_loss],
            "test_accuracy": float(result.test_accuracy)}


def _demo(epochs: int) -> dict:
    data = load_digits_split(seed=DEMO["split_seed"])
    seeds = list(DEMO["seeds"])
    models = [make_mlp(DEMO["depth"], seed=s, **kwargs)
              for kwargs in DEMO_ARMS.values() for s in seeds]
    results = train_ensemble(MLPEnsemble.from_models(models), data, epochs=epochs,
                             lrs=[DEMO["lr"]] * len(models), seeds=seeds * len(DEMO_ARMS))
    runs = [_curves(r) for r in results]
    return {arm: runs[k * len(seeds):(k + 1) * len(seeds)] for k, arm in enumerate(DEMO_ARMS)}


def _sweep_part(layer_norm: bool, lr: float, epochs: int) -> list[list[dict]]:
    data = load_digits_split(seed=SWEEP["split_seed"])
    grid = [(scale, seed) for scale in SWEEP["scales"] for seed in SWEEP["seeds"]]
    models = [scaled_he_mlp(SWEEP["depth"], scale=scale, layer_norm=layer_norm, seed=seed)
              for scale, seed in grid]
    results = train_ensemble(MLPEnsemble.from_models(models), data, epochs=epochs,
                             lrs=[lr] * len(grid), seeds=[seed for _, seed in grid])
    k = len(SWEEP["seeds"])
    runs = [_curves(r) for r in results]
    return [runs[i * k:(i + 1) * k] for i in range(len(SWEEP["scales"]))]


def run_job(job: Sequence, epochs: int | None = None) -> object:
    """One job of :data:`JOBS`, single-threaded: the demonstration (``{arm: [run per seed]}``)
    or one (layer_norm, lr) slice of the sweep (``[scale][seed] -> run``). A run is
    ``{"train_loss": [per epoch], "test_loss": [...], "test_accuracy": float}``."""
    torch.set_num_threads(1)
    if job[0] == "demo":
        return _demo(epochs or DEMO["epochs"])
    if job[0] == "sweep":
        return _sweep_part(bool(job[1]), float(job[2]), epochs or SWEEP["epochs"])
    raise ValueError(f"job must be one of {list(JOBS)}, got {job!r}")


def _assemble(parts: list) -> dict:
    """``{"demo": ..., "sweep": {"with"|"without": {lr: [scale][seed] -> run}}}``."""
    sweep: dict = {"without": {}, "with": {}}
    for job, part in zip(JOBS[1:], parts[1:], strict=True):
        sweep["with" if job[1] else "without"][f"{job[2]:g}"] = part
    return {"demo": parts[0], "sweep": sweep}


def full_runs(epochs: int | None = None) -> dict:
    """Every job of :data:`JOBS` in this process: ``{"demo": ..., "sweep": ...}``
    (``epochs`` None: each experiment's own budget). JSON-able, for ``run_on_paths``."""
    return _assemble([run_job(job, epochs) for job in JOBS])


def final_accuracies(epochs: int | None = None) -> dict:
    """The final test accuracy of every run: ``{"demo": {arm: [per seed]}, "sweep":
    {"without"|"with": {lr: [scale][seed]}}}`` (JSON-able, for ``run_on_paths``)."""
    runs = full_runs(epochs)
    return {"demo": {arm: [r["test_accuracy"] for r in rs] for arm, rs in runs["demo"].items()},
            "sweep": {key: {lr: [[r["test_accuracy"] for r in per_scale] for per_scale in part]
                            for lr, part in by_lr.items()}
                      for key, by_lr in runs["sweep"].items()}}


def _nan(v):
    return math.nan if v is None or not math.isfinite(v) else float(v)


def _first_losses(runs: dict, epochs: int) -> list[float]:
    """The first ``epochs`` mean training losses of every run, in a fixed order (NaN where a
    run had diverged or stopped)."""
    out = []

    def add(run):
        losses = list(run["train_loss"][:epochs])
        losses += [math.nan] * (epochs - len(losses))
        out.extend(_nan(v) for v in losses)

    for arm in DEMO_ARMS:
        for run in runs["demo"][arm]:
            add(run)
    for key in ("without", "with"):
        for lr in SWEEP["lrs"]:
            for per_scale in runs["sweep"][key][f"{lr:g}"]:
                for run in per_scale:
                    add(run)
    return out


def first_epochs(epochs: int = CHECK_EPOCHS) -> list[float]:
    """The live check's quantity: the mean training loss of each of the 69 runs in each of
    its first ``epochs`` epochs, trained exactly as the stored run's jobs (NaN where the loss
    is not finite). Module-level and JSON-able, for ``numerics_paths.run_on_paths``."""
    return _first_losses(full_runs(epochs), epochs)


def per_run_spread(values: dict) -> list[float]:
    """Each run's relative spread ``(max - min) / max |v|`` over the numerics paths
    (``values``: path -> :func:`first_epochs` list, ``None`` for NaN); 0 where every path is
    NaN, ``inf`` where some are NaN and some not."""
    columns = list(zip(*[[_nan(v) for v in vals] for vals in values.values()], strict=True))
    out = []
    for col in columns:
        nans = [math.isnan(v) for v in col]
        if all(nans):
            out.append(0.0)
        elif any(nans):
            out.append(math.inf)
        else:
            out.append((max(col) - min(col)) / max(max(abs(v) for v in col), 1e-12))
    return out


def compare_first_epochs(live: Sequence[float], stored: Sequence[float],
                         tolerance: Sequence[float]) -> list[float]:
    """Per run, ``|live - stored| / |stored|`` divided by that run's ``tolerance`` (a run
    passes at <= 1); 0 where both are NaN, ``inf`` where only one is."""
    if not len(live) == len(stored) == len(tolerance):
        raise ValueError(f"live, stored and tolerance need one value per run, got "
                         f"{len(live)}, {len(stored)} and {len(tolerance)}")
    out = []
    for a, b, tol in zip(live, stored, tolerance, strict=True):
        a, b = _nan(a), _nan(b)
        if math.isnan(a) or math.isnan(b):
            out.append(0.0 if math.isnan(a) and math.isnan(b) else math.inf)
        else:
            out.append(abs(a - b) / max(abs(b), 1e-12) / tol)
    return out


@dataclass(frozen=True)
class LiveCheck:
    """The live re-run against the stored run, run by run: ``ratios`` (each run's relative
    gap over its tolerance), ``spreads`` (each run's spread over the numerics paths),
    ``factor`` and ``floor`` (tolerance = factor x max(spread, floor)), ``epochs``, the
    number of ``paths``, and ``skipped``: runs that diverged on some paths only, not compared.
    """

    ratios: tuple
    spreads: tuple
    factor: float
    floor: float
    epochs: int
    paths: int
    skipped: int

    @property
    def passed(self) -> bool:
        return all(r <= 1 for r in self.ratios)

    def text(self) -> str:
        """What was compared and at which tolerance (not the live gaps: they vary by CPU)."""
        first = "first epoch" if self.epochs == 1 else f"first {self.epochs} epochs"
        finite = [s for s in self.spreads if math.isfinite(s)]
        lines = [f"this machine's {first} of {len(self.ratios)} runs: every training loss",
                 f"  within its tolerance of the stored run: {self.factor:g} x the run's "
                 f"spread over",
                 f"  {self.paths} numerics paths, the spread counted as at least "
                 f"{self.floor:.0e}",
                 f"  (spreads: median {float(np.median(finite)):.0e}, largest "
                 f"{max(finite):.0e})",
                 f"  runs that diverge on some paths only, not compared: {self.skipped}"]
        return "\n".join(lines)


def check_live(doc: dict, live: Sequence[float] | None = None) -> LiveCheck:
    """Re-run :func:`first_epochs` here (or take ``live``) and compare it, run by run, with
    the stored run's first epoch at ``factor`` times that run's measured spread over the
    numerics paths (at least ``floor``). Raises ``AssertionError`` naming the worst run when
    this machine disagrees."""
    check = doc["check"]
    epochs = int(check["epochs"])
    stored = _first_losses(doc["runs"], epochs)
    spreads = per_run_spread(check["paths"]["values"])
    keep = [k for k, sp in enumerate(spreads) if math.isfinite(sp)]
    if live is None:
        live = first_epochs(epochs)
    factor, floor = float(check["factor"]), float(check["floor"])
    ratios = compare_first_epochs([live[k] for k in keep], [stored[k] for k in keep],
                                  [factor * max(spreads[k], floor) for k in keep])
    result = LiveCheck(tuple(ratios), tuple(spreads[k] for k in keep), factor, floor, epochs,
                       len(check["paths"]["values"]), len(spreads) - len(keep))
    if not result.passed:
        worst = int(np.argmax(ratios))
        raise AssertionError(f"run {keep[worst]}: the live first epoch differs from the "
                             f"stored run by {ratios[worst]:.1f} times its tolerance")
    return result


# --- reading the stored run -------------------------------------------------------------


def machine_words(doc: dict) -> str:
    """``AMD EPYC (AVX512), torch 2.13.0+cpu, 2026-11-26``: where a stored run was made."""
    m = doc.get("machine") or {}
    if not m:
        return "a machine that was not recorded"
    return (f"{m.get('cpu', '?')} ({m.get('cpu_capability', '?')}), torch "
            f"{m.get('torch', '?')}, {str(m.get('date', '?'))[:10]}")


def paths_trained_scales(doc: dict, layer_norm: bool, lr: float) -> dict:
    """``{path: [scales at which every seed trains]}`` of the sweep on each numerics path."""
    config = doc["config"]["sweep"]
    key = "with" if layer_norm else "without"
    return {path: [s for s, accs in zip(config["scales"], out["sweep"][key][f"{lr:g}"],
                                        strict=True) if min(accs) >= TRAINED_ACCURACY]
            for path, out in doc["outcomes_on_paths"].items()}


def paths_sentence(doc: dict, layer_norm: bool, lr: float) -> str:
    """``{0.5, 1, 2, 4}: 4; {1, 2, 4}: 1``: each set of trained scales that came out, and
    on how many numerics paths, most frequent first."""
    sets = paths_trained_scales(doc, layer_norm, lr)
    counts: dict[tuple, int] = {}
    for scales in sets.values():
        counts[tuple(scales)] = counts.get(tuple(scales), 0) + 1
    return "; ".join(f"{{{_scale_list(k)}}}: {n}"
                     for k, n in sorted(counts.items(), key=lambda kv: -kv[1]))


def paths_table(doc: dict) -> str:
    """The same code's final outcomes on every numerics path the command ran: the LN arm's
    test accuracy per seed in the demonstration, and the scales at which every seed of the
    sweep trains with LN at each learning rate (within 80 columns)."""
    config = doc["config"]["sweep"]
    lrs = [f"{lr:g}" for lr in config["lrs"]]
    lines = ["final outcomes of the same code on each numerics path:",
             f"{'path':20s}{'LN demo, acc. %':>17s}   with LN trains at scales, "
             f"lr {' / '.join(lrs)}"]
    for path, out in doc["outcomes_on_paths"].items():
        acc = " ".join(f"{100 * a:4.1f}" for a in out["demo"]["default init + LayerNorm"])
        ok = []
        for lr in lrs:
            per_scale = out["sweep"]["with"][lr]
            ok.append(",".join(f"{s:g}" for s, accs in zip(config["scales"], per_scale,
                                                          strict=True)
                               if min(accs) >= TRAINED_ACCURACY) or "none")
        lines.append(f"{path:20s}{acc:>17s}   {' / '.join(ok)}")
    return "\n".join(lines)


def demo_results(doc: dict) -> dict:
    """``{arm: [TrainingResult per seed]}`` of the stored demonstration (for the plots)."""
    out = {}
    for arm, runs in doc["runs"]["demo"].items():
        out[arm] = [TrainingResult([_nan(v) for v in r["train_loss"]],
                                   [_nan(v) for v in r["test_loss"]],
                                   float(r["test_accuracy"])) for r in runs]
    return out


def sweep_from_document(doc: dict) -> InitScaleSweep:
    """The stored sweep as an ``InitScaleSweep`` (``[layer_norm, lr, scale, seed]``)."""
    config = doc["config"]["sweep"]
    lrs, scales, seeds = tuple(config["lrs"]), tuple(config["scales"]), tuple(config["seeds"])
    runs = doc["runs"]["sweep"]
    accuracy = np.array([[[[run["test_accuracy"] for run in per_scale]
                           for per_scale in runs[key][f"{lr:g}"]] for lr in lrs]
                         for key in ("without", "with")], dtype=np.float64)
    loss = np.array([[[[_nan(run["train_loss"][-1]) for run in per_scale]
                       for per_scale in runs[key][f"{lr:g}"]] for lr in lrs]
                     for key in ("without", "with")], dtype=np.float64)
    assert accuracy.shape == (2, len(lrs), len(scales), len(seeds))
    return InitScaleSweep(scales, lrs, seeds, int(config["epochs"]), accuracy, loss,
                          ~np.isfinite(loss))


class DemoSummary:
    """The stored demonstration in the chapter's words: per arm the final training loss and
    the test accuracy over seeds, He against LN seed by seed, and the values the prose
    glues (:meth:`glue_values`)."""

    HE, LN, PLAIN = "He init", "default init + LayerNorm", "default init"

    def __init__(self, doc: dict):
        runs = doc["runs"]["demo"]
        self.arms = list(runs)
        self.seeds = list(doc["config"]["demo"]["seeds"])
        self.accuracy = {a: 100 * np.array([r["test_accuracy"] for r in runs[a]])
                         for a in self.arms}
        self.final_loss = {a: np.array([_nan(r["train_loss"][-1]) for r in runs[a]])
                           for a in self.arms}
        self.curves = {a: [[_nan(v) for v in r["train_loss"]] for r in runs[a]]
                       for a in self.arms}
        self.he_lower_loss = int((self.final_loss[self.HE] < self.final_loss[self.LN]).sum())
        self.he_higher_acc = int((self.accuracy[self.HE] > self.accuracy[self.LN]).sum())

    def table(self) -> str:
        lines = []
        for a in self.arms:
            loss, acc = self.final_loss[a], self.accuracy[a]
            lines.append(f"{a:25s} train loss {loss.min():.2f}-{loss.max():.2f}, "
                         f"test acc. {acc.mean():.1f} % ({acc.min():.1f}-{acc.max():.1f})")
        n = len(self.seeds)
        lines.append(f"He vs LN, seed by seed: lower training loss in {self.he_lower_loss} "
                     f"of {n}, higher test accuracy in {self.he_higher_acc} of {n}")
        return "\n".join(lines)

    def plain_stays_at_chance(self, tol: float = 0.01) -> bool:
        """Every epoch of every seed without LN (default init) within ``tol`` of ln 10."""
        return all(abs(v - math.log(10)) < tol for c in self.curves[self.PLAIN] for v in c)

    def glue_values(self) -> dict:
        out = {}
        for key, arm in (("without", self.PLAIN), ("with", self.LN), ("He", self.HE)):
            acc, loss = self.accuracy[arm], self.final_loss[arm]
            out[f"acc_{key}"] = f"{acc.mean():.0f}"
            out[f"acc_{key}_range"] = f"{acc.min():.0f}-{acc.max():.0f}"
            out[f"loss_{key}_range"] = f"{loss.min():.2f}-{loss.max():.2f}"
        out["he_lower_loss"] = self.he_lower_loss
        out["he_higher_acc"] = self.he_higher_acc
        return out


def _scale_list(scales) -> str:
    """``0.5, 1, 2`` (``—`` for none)."""
    return ", ".join(f"{s:g}" for s in scales) or "—"


class SweepSummary:
    """The stored init-scale sweep in the chapter's words: the table of test accuracies, the
    scales at which every seed trains (:data:`TRAINED_ACCURACY`), the width of that range as
    a ratio, the divergences, and the settings where the seeds disagree."""

    def __init__(self, sweep: InitScaleSweep, threshold: float = TRAINED_ACCURACY):
        self.sweep = sweep
        self.threshold = threshold

    def trained_scales(self, layer_norm: bool, lr: float) -> list[float]:
        worst = self.sweep.spread(layer_norm, lr)["min"]
        return [s for s, a in zip(self.sweep.scales, worst, strict=True) if a >= self.threshold]

    def split_settings(self) -> list[tuple[bool, float, float, int]]:
        """``(layer_norm, lr, scale, seeds that train)`` where some, not all, seeds train."""
        out = []
        for k, lr in enumerate(self.sweep.lrs):
            for ln in (False, True):
                for i, scale in enumerate(self.sweep.scales):
                    ok = int((self.sweep.accuracy[int(ln), k, i] >= self.threshold).sum())
                    if 0 < ok < len(self.sweep.seeds):
                        out.append((ln, lr, scale, ok))
        return out

    def table(self) -> str:
        s = self.sweep
        lines = ["test accuracy in %, mean (min-max) over seeds "
                 + ", ".join(map(str, s.seeds)),
                 " " * 16 + "".join(f"{f'scale {x:g}':>11s}" for x in s.scales)]
        for lr in s.lrs:
            for ln in (False, True):
                sp = s.spread(ln, lr)
                cells = "".join(f"{f'{100 * m:.0f} ({100 * lo:.0f}-{100 * hi:.0f})':>11s}"
                                for m, lo, hi in zip(sp["mean"], sp["min"], sp["max"],
                                                     strict=True))
                lines.append(f"lr {lr:g}, {'with' if ln else 'no'} LN".ljust(16) + cells)
        runs = s.diverged[0].size
        lines.append(f"diverged (non-finite loss), of {runs} runs each: without LN "
                     f"{int(s.diverged[0].sum())}, with LN {int(s.diverged[1].sum())}")
        for lr in s.lrs:
            for ln in (False, True):
                lines.append(f"lr {lr:g}, {'with' if ln else 'without'} LN: every seed >= "
                             f"{100 * self.threshold:.0f} % at scales "
                             f"{_scale_list(self.trained_scales(ln, lr))}")
        return "\n".join(lines)

    def range_ratio(self, layer_norm: bool, lr: float) -> float | None:
        ok = self.trained_scales(layer_norm, lr)
        return max(ok) / min(ok) if ok else None

    def split_sentence(self) -> str:
        """The settings where the seeds disagree, compactly: ``LN, lr 0.1, scale 2: 2/3``
        (settings, then how many seeds train); ``—`` when there are none."""
        n = len(self.sweep.seeds)
        parts = [f"{'LN' if ln else 'no LN'}, lr {lr:g}, scale {scale:g}: {ok}/{n}"
                 for ln, lr, scale, ok in self.split_settings()]
        return "; ".join(parts) if parts else "—"

    def glue_values(self) -> dict:
        s = self.sweep
        out = {"diverged_without_LN": int(s.diverged[0].sum()),
               "diverged_with_LN": int(s.diverged[1].sum()),
               "runs_per_variant": int(s.diverged[0].size),
               "sweep_split": self.split_sentence()}
        for lr in s.lrs:
            for ln in (False, True):
                key = f"{'with' if ln else 'without'}_LN_lr{f'{lr:g}'.replace('.', '')}"
                ok = self.trained_scales(ln, lr)
                out[f"trained_scales_{key}"] = _scale_list(ok)
                ratio = self.range_ratio(ln, lr)
                out[f"range_ratio_{key}"] = "—" if ratio is None else f"{ratio:g}"
        return out


def extend_live_check(paths=("avx2+compatible", "avx512+compatible"),
                      path=COMMITTED_PATH) -> dict:
    """Add numerics paths to the stored live-check measurement (first epochs, every run) and
    rewrite the file: the mixtures of torch's SIMD kernels with MKL's COMPATIBLE path
    disagreed with the first five paths' spread on some runs. Returns the updated record."""
    import time

    from layernorm_tutorial.lab.common import numerics_paths, stored_results

    doc = stored_results.load_results(path)
    record = doc["check"]["paths"]
    start = time.perf_counter()
    results = numerics_paths.run_on_paths(record["target"], record["kwargs"], list(paths),
                                          desc="extra paths")
    for name in paths:
        record["values"][name] = results[name]
        record["paths"][name] = numerics_paths.ALL_PATHS[name]
    values = {k: [math.nan if x is None else x for x in v]
              for k, v in record["values"].items()}
    record["relative_spread"] = numerics_paths.relative_spread(values)
    record["absolute_spread"] = numerics_paths.absolute_spread(values)
    record["extended"] = {
        "paths": list(paths), "seconds": time.perf_counter() - start,
        "command": "python -c 'from layernorm_tutorial.lab.principles import "
                   "stored_training; stored_training.extend_live_check()'",
        "machine": numerics_paths.machine_info(),
        "why": "the two mixed paths (torch SIMD x MKL COMPATIBLE) disagreed with the first "
               "five paths' spread on some runs; added to the measurement"}
    stored_results.save_results(doc, path, overwrite=True, digits=9)
    return record
