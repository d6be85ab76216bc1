"""The controlled experiments behind the folk claims, and the sweep that runs them.

Each :class:`Experiment` fixes one model family and training budget and varies only the
normalization (and, for claim 1, the batch size). Seeds follow the book's verdict method
(:func:`layernorm_tutorial.lab.common.verdict.seed_plan`): the learning rate of every
(norm, batch size) setting is chosen on *tuning* seeds that are never reported, and the
*reported* seeds are then trained at that rate. Seed ``s`` fixes the train/validation split
(:func:`~.data.load_evidence_data`), the initialization and the data order of every arm, so
the arms pair up by seed.

**Choosing the rate.** The tuning seeds are trained at every rate of a small grid on a
half-decade ladder (``1, 3, 10, 30, ... x 1e-3``, times ``sqrt(batch_size / 32)``); the rate
with the best mean *validation* accuracy over the tuning seeds wins. When the winner sits at an
edge of the rates tried, the next rung beyond it is added (up to ``grid_extensions`` times), so
a method is not judged at a rate the grid cut off. The test set plays no part in any choice.

**Rate ranges** (:class:`RateRange`, claim 5's "allows larger learning rates"): the reported
seeds of each norm are trained at *every* rate of a wide ladder at batch 32, and the ladder is
extended upwards until every seed of every norm has failed (:func:`~.runner.run_failed`) at
the top rate, so that each arm's largest good rate and failure rate lie inside the grid.

Claims (seed 004.7, 003.5, 003.8, 000.3):

1. fully connected nets: BN beats LN at large batch, LN beats BN at small batch
   -> ``mlp_batch_size``: MLP, none / bn / ln, batch sizes 2 .. 256 (3 epochs each);
2. recurrent nets: LN beats BN -> ``rnn``: row-by-row Elman RNN, none / bn / ln;
3. CNNs: "LN does not converge", CNNs prefer BN -> ``cnn``: none / bn / ln over (C, H, W) /
   gn / ln_c (LN over channels per position, ConvNeXt style);
4. BN regularizes slightly, LN does not -> train/test gap of the runs above;
5. LN speeds up convergence and allows larger learning rates (BN: allows higher learning
   rates, 003.5) -> learning curves of the runs above, and ``RATE_RANGES`` for the MLP and
   the RNN.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context

from layernorm_tutorial.lab.common.verdict import seed_plan
from layernorm_tutorial.lab.evidence.models import NORMS
from layernorm_tutorial.lab.evidence.runner import RunSpec, run_failed, train_run

__all__ = ["Experiment", "RateRange", "EXPERIMENTS", "RATE_RANGES", "TUNING_SEEDS",
           "REPORTED_SEEDS", "LR_GRID", "ladder_rate", "lr_grid", "tiny_experiments",
           "tiny_rate_ranges", "select_lr", "run_sweep", "default_workers"]

# Seeds: one tuning seed chooses every rate; five reported seeds carry every verdict.
TUNING_SEEDS, REPORTED_SEEDS = seed_plan(n_reported=5, n_tuning=1, first=0)
REFERENCE_BATCH = 32
GRID_RUNGS = (0, 1, 2)          # 1e-3, 3e-3, 1e-2 at the reference batch size 32
RANGE_RUNGS = tuple(range(7))   # 1e-3 ... 1 at batch 32, before any extension


def ladder_rate(rung: int, batch_size: int = REFERENCE_BATCH) -> float:
    """The Adam rate on rung ``rung`` of the half-decade ladder at ``batch_size``:
    ``(1 or 3) * 10 ** (rung // 2 - 3) * sqrt(batch_size / 32)``, three significant digits.

    >>> [ladder_rate(i) for i in (-1, 0, 1, 2, 6)]
    [0.0003, 0.001, 0.003, 0.01, 1.0]
    """
    mantissa = 1 if rung % 2 == 0 else 3
    rate = mantissa * 10.0 ** (rung // 2 - 3) * math.sqrt(batch_size / REFERENCE_BATCH)
    return float(f"{rate:.3g}")


LR_GRID = tuple(ladder_rate(i) for i in GRID_RUNGS)


def lr_grid(batch_size: int, rungs: Iterable[int] = GRID_RUNGS) -> tuple[float, ...]:
    """The starting grid of rates at ``batch_size``: the ladder's rungs scaled by
    ``sqrt(batch_size / 32)``. Square-root scaling keeps the grid centred where Adam's best
    rate tends to move as the batch (and so the gradient noise) changes."""
    return tuple(ladder_rate(i, batch_size) for i in rungs)


@dataclass(frozen=True)
class Experiment:
    """One controlled comparison: a model family, its norms, batch sizes and budget."""

    name: str
    claims: tuple[int, ...]
    model: str
    norms: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    epochs: int
    tuning_seeds: tuple[int, ...] = TUNING_SEEDS
    reported_seeds: tuple[int, ...] = REPORTED_SEEDS
    rungs: tuple[int, ...] = GRID_RUNGS
    max_steps: int | None = None   # only the tests cap runs
    grid_extensions: int = 2
    # the unnormalized baseline only at these batch sizes (None: at every size); no claim
    # compares "none" across batch sizes, so the MLP runs it at batch 32 only
    none_batch_sizes: tuple[int, ...] | None = None

    def settings(self) -> list[tuple[str, int]]:
        return [(norm, b) for norm in self.norms for b in self.batch_sizes
                if norm != "none" or self.none_batch_sizes is None
                or b in self.none_batch_sizes]

    def spec(self, norm: str, batch_size: int, lr: float, seed: int) -> RunSpec:
        return RunSpec(self.model, norm, batch_size, lr, seed, self.epochs, self.max_steps)

    def as_dict(self) -> dict:
        return asdict(self)


@dataclass(frozen=True)
class RateRange:
    """Every norm of ``model`` at every rate of a wide ladder (batch ``batch_size``), on the
    reported seeds; extended upwards by one rung at a time (up to ``extensions``) until every
    run at the top rate has failed."""

    name: str
    model: str
    norms: tuple[str, ...]
    epochs: int
    batch_size: int = REFERENCE_BATCH
    rungs: tuple[int, ...] = RANGE_RUNGS
    seeds: tuple[int, ...] = REPORTED_SEEDS
    extensions: int = 2
    max_steps: int | None = None

    def spec(self, norm: str, rung: int, seed: int) -> RunSpec:
        return RunSpec(self.model, norm, self.batch_size, ladder_rate(rung, self.batch_size),
                       seed, self.epochs, self.max_steps)

    def as_dict(self) -> dict:
        return asdict(self)


EXPERIMENTS = (
    Experiment("mlp_batch_size", (1, 4, 5), "mlp", NORMS["mlp"],
               (2, 8, 16, 32, 64, 128, 256), epochs=3, none_batch_sizes=(32,)),
    Experiment("cnn", (3, 4, 5), "cnn", NORMS["cnn"], (32,), epochs=4),
    Experiment("rnn", (2, 5), "rnn", NORMS["rnn"], (32,), epochs=6),
)
# same budgets as the batch-32 settings above, so those reported runs are shared
RATE_RANGES = (
    RateRange("lr_range_mlp", "mlp", NORMS["mlp"], epochs=3),
    RateRange("lr_range_rnn", "rnn", NORMS["rnn"], epochs=6),
)


def tiny_experiments(max_steps: int = 3, reported: tuple[int, ...] = (1,)) -> tuple:
    """The same experiments with a few batch sizes, two rates, one tuning seed, ``reported``
    seeds and ``max_steps`` optimizer steps per run: the tests and quick checks run these."""
    out = []
    for exp in EXPERIMENTS:
        sizes = tuple(b for b in exp.batch_sizes if b in (8, 32, 256)) or exp.batch_sizes
        out.append(replace(exp, batch_sizes=sizes, reported_seeds=reported, rungs=exp.rungs[1:],
                           max_steps=max_steps, epochs=1, grid_extensions=0))
    return tuple(out)


def tiny_rate_ranges(max_steps: int = 3, reported: tuple[int, ...] = (1,)) -> tuple:
    """The rate ranges on three rungs (1e-2, 0.1, 1), no extension, ``max_steps`` steps."""
    return tuple(replace(r, rungs=(2, 4, 6), seeds=reported, max_steps=max_steps, epochs=1,
                         extensions=0) for r in RATE_RANGES)


def extend_rungs(tried: Iterable[int], winner: int) -> int | None:
    """The rung to add when ``winner`` is the lowest or highest rung ``tried``; ``None`` when
    it is inside the grid."""
    tried = sorted(tried)
    if len(tried) > 1 and winner == tried[0]:
        return winner - 1
    if len(tried) > 1 and winner == tried[-1]:
        return winner + 1
    return None


def select_lr(records: list[dict]) -> float:
    """The rate with the highest mean final validation accuracy over the (tuning) seeds of
    ``records`` (ties: lower mean validation loss, then the smaller rate). ``records`` are the
    tuning runs of one setting, any number of seeds per rate."""
    if not records:
        raise ValueError("select_lr needs at least one run record")
    by_lr: dict[float, list[dict]] = {}
    for r in records:
        by_lr.setdefault(r["spec"]["lr"], []).append(r)

    def key(lr):
        rs = by_lr[lr]
        losses = [r["final"]["val_loss"] for r in rs]
        loss = (math.inf if any(v is None or not math.isfinite(v) for v in losses)
                else sum(losses) / len(losses))
        return (-sum(r["final"]["val_acc"] for r in rs) / len(rs), loss, lr)

    return min(by_lr, key=key)


def _estimated_cost(spec: RunSpec) -> float:
    """Rough seconds-like cost, so that the longest runs start first."""
    per_step = {"mlp": 1.0, "rnn": 2.3, "cnn": 4.6}[spec.model]
    return per_step * (spec.total_steps(1078) + 30)


class _Runner:
    """Trains specs, each at most once (a spec shared by two experiments runs once)."""

    def __init__(self, workers: int, on_done: Callable[[], None]):
        self.workers, self.on_done, self.done = workers, on_done, {}

    def run(self, specs: Iterable[RunSpec]) -> None:
        todo = sorted(set(specs) - self.done.keys(), key=_estimated_cost, reverse=True)
        if self.workers <= 1:
            for spec in todo:
                self.done[spec] = train_run(spec)
                self.on_done()
            return
        with ProcessPoolExecutor(self.workers, mp_context=get_context("spawn")) as pool:
            futures = {pool.submit(train_run, spec): spec for spec in todo}
            for future in as_completed(futures):
                self.done[futures[future]] = future.result()
                self.on_done()


def run_sweep(experiments=EXPERIMENTS, workers: int = 1, progress: bool = False,
              rate_ranges=RATE_RANGES, fixed_lr: dict | None = None) -> dict:
    """Run every experiment and rate range; return ``{"selected_lr", "runs", "range_runs"}``.

    ``fixed_lr`` (a confirmatory run): ``{(experiment, norm, batch_size): selected_lr entry}``
    of an earlier sweep; phase 1 is skipped, every setting is trained at that entry's rate
    (``KeyError`` naming a setting it lacks) and its entry is copied into ``selected_lr``.

    Phase 1 trains the tuning seeds at every rate of each setting's grid and extends the grid
    beyond a winning edge (:func:`extend_rungs`, up to ``grid_extensions`` rounds); phase 2
    trains the reported seeds at each setting's chosen rate (:func:`select_lr`) and every
    reported seed of each rate range at every rung, extending the ladder upwards while some run
    at its top rate has not failed.

    ``runs`` are run records (see :func:`~.runner.train_run`) with three extra keys,
    ``experiment``, ``role`` (``"tuning"`` or ``"reported"``) and ``selected`` (trained at the
    setting's chosen rate). ``selected_lr`` lists ``{"experiment", "norm", "batch_size", "lr",
    "rates_tried"}`` per setting. ``range_runs`` are the rate-range records, with
    ``experiment`` and ``rung``.
    """
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=0, desc="evidence sweep", unit="run")

    def tick() -> None:
        if bar is not None:
            bar.update(1)

    runner = _Runner(workers, tick)

    def submit(specs: list[RunSpec]) -> None:
        if bar is not None:
            bar.total += len(set(specs) - runner.done.keys())
            bar.refresh()
        runner.run(specs)

    rungs = {(exp.name, norm, b): list(exp.rungs) for exp in experiments
             for norm, b in exp.settings()}
    by_name = {exp.name: exp for exp in experiments}

    def tuning_specs(key, rung_list):
        exp = by_name[key[0]]
        return [exp.spec(key[1], key[2], ladder_rate(i, key[2]), s)
                for i in rung_list for s in exp.tuning_seeds]

    def tuning_records(key):
        return [runner.done[s] for s in tuning_specs(key, rungs[key])]

    if fixed_lr is not None:
        missing = [key for key in rungs if key not in fixed_lr]
        if missing:
            raise KeyError(f"fixed_lr lacks the settings {missing}")
    else:
        submit([s for key, rs in rungs.items() for s in tuning_specs(key, rs)])
    for round_ in range(0 if fixed_lr is not None else
                        max((exp.grid_extensions for exp in experiments), default=0)):
        new = []
        for key, rs in rungs.items():
            if round_ >= by_name[key[0]].grid_extensions:
                continue
            lr = select_lr(tuning_records(key))
            winner = next(i for i in rs if ladder_rate(i, key[2]) == lr)
            rung = extend_rungs(rs, winner)
            if rung is not None:
                rs.append(rung)
                new += tuning_specs(key, [rung])
        if not new:
            break
        submit(new)

    selected, reported = [], {}
    for key, rs in rungs.items():
        exp = by_name[key[0]]
        if fixed_lr is not None:
            selected.append(dict(fixed_lr[key]))
            lr = fixed_lr[key]["lr"]
        else:
            lr = select_lr(tuning_records(key))
            selected.append({"experiment": key[0], "norm": key[1], "batch_size": key[2],
                             "lr": lr, "rates_tried": sorted(ladder_rate(i, key[2])
                                                             for i in rs)})
        reported[key] = [exp.spec(key[1], key[2], lr, s) for s in exp.reported_seeds]

    range_rungs = {r.name: sorted(r.rungs) for r in rate_ranges}

    def range_specs(rr, rung_list):
        return [rr.spec(norm, i, s) for norm in rr.norms for i in rung_list for s in rr.seeds]

    submit([s for specs in reported.values() for s in specs]
           + [s for rr in rate_ranges for s in range_specs(rr, rr.rungs)])
    for _ in range(max((rr.extensions for rr in rate_ranges), default=0)):
        new = []
        for rr in rate_ranges:
            rs = range_rungs[rr.name]
            if rs[-1] - max(rr.rungs) < rr.extensions and \
                    not all(run_failed(runner.done[s]) for s in range_specs(rr, rs[-1:])):
                rs.append(rs[-1] + 1)
                new += range_specs(rr, rs[-1:])
        if not new:
            break
        submit(new)
    if bar is not None:
        bar.close()

    chosen = {(d["experiment"], d["norm"], d["batch_size"]): d["lr"] for d in selected}
    runs = []
    for key, rs in rungs.items():
        for spec in ([] if fixed_lr is not None else tuning_specs(key, sorted(rs))):
            runs.append({"experiment": key[0], "role": "tuning",
                         "selected": chosen[key] == spec.lr, **runner.done[spec]})
        for spec in reported[key]:
            runs.append({"experiment": key[0], "role": "reported", "selected": True,
                         **runner.done[spec]})
    range_runs = []
    for rr in rate_ranges:
        for i in range_rungs[rr.name]:
            for spec in range_specs(rr, [i]):
                range_runs.append({"experiment": rr.name, "rung": i, **runner.done[spec]})
    return {"selected_lr": selected, "runs": runs, "range_runs": range_runs,
            "trained": len(runner.done)}


def default_workers() -> int:
    """Two worker processes on a machine with at least two cores, otherwise one."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1
