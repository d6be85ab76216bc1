"""The controlled experiments behind the folk claims, and the sweep that runs them.

Each :class:`Experiment` fixes one model family and training budget and varies only the
normalization (and, for claim 1, the batch size). The learning rate is chosen separately for
every (norm, batch size) setting: seed 0 is trained at each rate of a small grid, the rate with
the best *validation* accuracy wins, and the remaining seeds are trained at that rate. When the
winner sits at an edge of the rates tried, the grid is extended by one rate beyond that edge
(up to ``grid_extensions`` times), so that a method is not judged at a rate the grid cut
off. The test set plays no part in any choice.

Claims (seed 004.7, 003.5, 003.8, 000.3):

1. fully connected nets: BN beats LN at large batch, LN beats BN at small batch
   -> ``mlp_batch_size``: MLP, none / bn / ln, batch sizes 2 .. 256;
2. recurrent nets: LN beats BN -> ``rnn``: row-by-row Elman RNN, none / bn / ln;
3. CNNs: "LN does not converge", CNNs prefer BN -> ``cnn``: none / bn / ln over (C, H, W) /
   gn / ln_c (LN over channels per position, ConvNeXt style);
4. BN regularizes slightly, LN does not -> train/test gap of the runs above;
5. LN speeds up convergence -> learning curves of the runs above.
"""

from __future__ import annotations

import math
import os
from collections.abc import Callable, Iterable
from concurrent.futures import ProcessPoolExecutor, as_completed
from dataclasses import asdict, dataclass, replace
from multiprocessing import get_context

from layernorm_tutorial.lab.evidence.data import load_evidence_data
from layernorm_tutorial.lab.evidence.models import NORMS
from layernorm_tutorial.lab.evidence.runner import RunSpec, train_run

__all__ = ["Experiment", "EXPERIMENTS", "SEEDS", "LR_GRID", "lr_grid", "tiny_experiments",
           "sweep_specs", "select_lr", "run_sweep"]

SEEDS = (0, 1, 2)
LR_GRID = (1e-3, 3e-3, 1e-2)   # Adam rates at the reference batch size 32
REFERENCE_BATCH = 32
GRID_STEP = math.sqrt(10)      # spacing of one grid extension (the grid's own spacing)


def lr_grid(batch_size: int, base: Iterable[float] = LR_GRID) -> tuple[float, ...]:
    """The grid of rates tried at ``batch_size``: ``base * sqrt(batch_size / 32)``.

    Square-root scaling keeps the grid centred where Adam's best rate tends to move as the
    batch (and so the gradient noise) changes; the sweep still picks the best of three.
    """
    scale = math.sqrt(batch_size / REFERENCE_BATCH)
    return tuple(float(f"{lr * scale:.3g}") for lr in base)


@dataclass(frozen=True)
class Experiment:
    """One controlled comparison: a model family, its norms, batch sizes and budget."""

    name: str
    claims: tuple[int, ...]
    model: str
    norms: tuple[str, ...]
    batch_sizes: tuple[int, ...]
    epochs: int
    seeds: tuple[int, ...] = SEEDS
    lr_base: tuple[float, ...] = LR_GRID
    max_steps: int | None = None   # only the tests cap runs
    grid_extensions: int = 2

    def settings(self) -> list[tuple[str, int]]:
        return [(norm, b) for norm in self.norms for b in self.batch_sizes]

    def spec(self, norm: str, batch_size: int, lr: float, seed: int) -> RunSpec:
        return RunSpec(self.model, norm, batch_size, lr, seed, self.epochs, self.max_steps)

    def as_dict(self) -> dict:
        return asdict(self)


EXPERIMENTS = (
    Experiment("mlp_batch_size", (1, 4, 5), "mlp", NORMS["mlp"],
               (2, 4, 8, 16, 32, 64, 128, 256), epochs=5),
    Experiment("cnn", (3, 4, 5), "cnn", NORMS["cnn"], (32,), epochs=6),
    Experiment("rnn", (2, 5), "rnn", NORMS["rnn"], (32,), epochs=8),
)


def tiny_experiments(max_steps: int = 3, seeds: tuple[int, ...] = (0,)) -> tuple:
    """The same experiments with a few batch sizes, two rates, one seed and ``max_steps``
    optimizer steps per run: the tests and quick checks run these."""
    out = []
    for exp in EXPERIMENTS:
        sizes = tuple(b for b in exp.batch_sizes if b in (4, 32, 256)) or exp.batch_sizes
        out.append(replace(exp, batch_sizes=sizes, seeds=seeds, lr_base=exp.lr_base[1:],
                           max_steps=max_steps, epochs=1, grid_extensions=0))
    return tuple(out)


def sweep_specs(exp: Experiment) -> list[RunSpec]:
    """Phase 1: the first seed at every rate of the grid, for every setting."""
    return [exp.spec(norm, b, lr, exp.seeds[0])
            for norm, b in exp.settings() for lr in lr_grid(b, exp.lr_base)]


def extend_grid(tried: Iterable[float], winner: float) -> float | None:
    """The next rate to try when ``winner`` is the smallest or largest rate ``tried``
    (divided or multiplied by ``GRID_STEP``, three significant digits); ``None`` when the
    winner is inside the grid."""
    tried = sorted(tried)
    if len(tried) > 1 and winner == tried[0]:
        return float(f"{winner / GRID_STEP:.3g}")
    if len(tried) > 1 and winner == tried[-1]:
        return float(f"{winner * GRID_STEP:.3g}")
    return None


def select_lr(records: list[dict]) -> float:
    """The rate whose run has the highest final validation accuracy (ties: lower validation
    loss, then the smaller rate). ``records`` are the phase-1 runs of one setting."""
    if not records:
        raise ValueError("select_lr needs at least one run record")

    def key(r):
        loss = r["final"]["val_loss"]
        return (-r["final"]["val_acc"], loss if math.isfinite(loss) else math.inf,
                r["spec"]["lr"])

    return min(records, key=key)["spec"]["lr"]


def _estimated_cost(spec: RunSpec) -> float:
    per_step = {"mlp": 1.0, "rnn": 1.6, "cnn": 5.0}[spec.model]
    return per_step * spec.total_steps(1078) * (1 + spec.batch_size / 64)


def _run_all(specs: list[RunSpec], workers: int, on_done: Callable[[], None]) -> dict:
    """Train every spec; returns {spec: record}. Longest runs are started first."""
    specs = sorted(set(specs), key=_estimated_cost, reverse=True)
    out = {}
    if workers <= 1:
        data = load_evidence_data()
        for spec in specs:
            out[spec] = train_run(spec, data)
            on_done()
        return out
    with ProcessPoolExecutor(workers, mp_context=get_context("spawn")) as pool:
        futures = {pool.submit(train_run, spec): spec for spec in specs}
        for future in as_completed(futures):
            out[futures[future]] = future.result()
            on_done()
    return out


def run_sweep(experiments=EXPERIMENTS, workers: int = 1, progress: bool = False) -> dict:
    """Run every experiment and return ``{"selected_lr": ..., "runs": ...}``.

    Phase 1 trains the first seed at every rate of each setting's grid and extends the grid
    beyond a winning edge (:func:`extend_grid`, up to ``grid_extensions`` rounds); phase 2
    trains the other seeds at each setting's chosen rate (:func:`select_lr`).

    ``runs`` is a list of run records (see :func:`~.runner.train_run`) with two extra keys,
    ``experiment`` and ``selected`` (the run was trained at its setting's chosen rate).
    ``selected_lr`` lists ``{"experiment", "norm", "batch_size", "lr"}`` per setting.
    """
    phase1 = {exp.name: sweep_specs(exp) for exp in experiments}
    n_phase2 = sum(len(exp.settings()) * (len(exp.seeds) - 1) for exp in experiments)
    total = sum(map(len, phase1.values())) + n_phase2
    bar = None
    if progress:
        from tqdm.auto import tqdm
        bar = tqdm(total=total, desc="evidence sweep", unit="run")

    def tick() -> None:
        if bar is not None:
            bar.update(1)

    done1 = _run_all([s for specs in phase1.values() for s in specs], workers, tick)

    def trials(exp, norm, b):
        return [done1[s] for s in phase1[exp.name] if s.norm == norm and s.batch_size == b]

    # extend the grid where the winner sits at an edge, one rate per round
    for round_ in range(max((exp.grid_extensions for exp in experiments), default=0)):
        new = []
        for exp in experiments:
            if round_ >= exp.grid_extensions:
                continue
            for norm, b in exp.settings():
                records = trials(exp, norm, b)
                lr = extend_grid([r["spec"]["lr"] for r in records], select_lr(records))
                if lr is not None:
                    spec = exp.spec(norm, b, lr, exp.seeds[0])
                    phase1[exp.name].append(spec)
                    new.append(spec)
        if not new:
            break
        if bar is not None:
            bar.total += len(new)
            bar.refresh()
        done1.update(_run_all(new, workers, tick))

    selected, phase2 = [], {}
    for exp in experiments:
        for norm, b in exp.settings():
            lr = select_lr(trials(exp, norm, b))
            selected.append({"experiment": exp.name, "norm": norm, "batch_size": b, "lr": lr})
            phase2[exp.name, norm, b] = [exp.spec(norm, b, lr, seed) for seed in exp.seeds[1:]]
    done2 = _run_all([s for specs in phase2.values() for s in specs], workers, tick)
    if bar is not None:
        bar.close()

    chosen = {(d["experiment"], d["norm"], d["batch_size"]): d["lr"] for d in selected}
    runs = []
    for exp in experiments:
        for spec in phase1[exp.name]:
            is_best = chosen[exp.name, spec.norm, spec.batch_size] == spec.lr
            runs.append({"experiment": exp.name, "selected": is_best, **done1[spec]})
        for norm, b in exp.settings():
            for spec in phase2[exp.name, norm, b]:
                runs.append({"experiment": exp.name, "selected": True, **done2[spec]})
    return {"selected_lr": selected, "runs": runs}


def default_workers() -> int:
    """Two worker processes on a machine with at least two cores, otherwise one."""
    return 2 if (os.cpu_count() or 1) >= 2 else 1
