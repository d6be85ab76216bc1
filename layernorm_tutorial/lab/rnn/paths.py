"""The RNN race on other CPUs' arithmetic: the measured tolerance of the chapter's live check,
and a replication of every reported run on a second numerics path.

Training is chaotic: the last bit of one reduction grows into a different outcome of the same
seed (:mod:`~layernorm_tutorial.lab.common.numerics_paths`). Two measurements make the
chapter's numbers readable on any CPU:

0. **Dynamics at initialization.** Every value the chapter prints of
   :func:`~.experiments.unrolled_dynamics` (float64), on every path: the settings whose
   values differ are chaotic (:func:`~.report.chaotic_settings`).
1. **Tolerance.** :data:`CHECK` (one epoch of one reported run) is retrained on every path of
   :data:`~layernorm_tutorial.lab.common.numerics_paths.PATHS`; the spread of its training
   loss across paths is the measured tolerance of the chapter's live re-run
   (:func:`live_check` allows :data:`TOLERANCE_MULTIPLE` times it, plus the rounding of the
   stored file).
2. **Replication.** Every reported run of ``book/data/rnn_race.json`` is trained again, at its
   stored rate, on :data:`REPLICATION_PATH`; :func:`replication_table` judges the chapter's
   verdicts on those runs next to the stored ones (same word? effect inside the stored
   interval?).

``python -m layernorm_tutorial.lab.rnn.paths`` writes both, with provenance, to
``book/data/rnn_paths.json`` (:data:`COMMITTED_PATH`).
"""

from __future__ import annotations

from dataclasses import dataclass

from layernorm_tutorial.lab.common import numerics_paths, stored_results
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance
from layernorm_tutorial.lab.rnn import race

__all__ = ["CHECK", "COMMITTED_PATH", "REPLICATION_PATH", "TOLERANCE_MULTIPLE", "LiveCheck",
           "live_check", "measure", "replicated_doc", "replication_table", "reported_runs"]

COMMITTED_PATH = BOOK_DATA / "rnn_paths.json"
COMMAND = "python -m layernorm_tutorial.lab.rnn.paths"
#: The live check: one epoch of the first reported seed's LN-LSTM run.
CHECK = {"arm": "LN-LSTM", "seed": race.REPORTED_SEEDS[0], "epochs": 1}
REPLICATION_PATH = "default+compatible"
#: The live re-run may differ from the stored one by this multiple of the measured spread.
TOLERANCE_MULTIPLE = 10
_DIGITS = 5  # significant digits of the stored files (save_results)


def reported_runs(epochs: int = race.EPOCHS) -> list[dict]:
    """Every reported run of the stored race, retrained at its stored rate on this process's
    numerics path (the target of ``run_on_paths``): ``[{"arm", "lr", "seed", "role",
    "train_loss", "val_accuracy", "test_accuracy"}]``."""
    doc = stored_results.load_results(race.COMMITTED_PATH)
    jobs = [(arm, doc["selected_lr"][arm], seed, "reported", epochs) for arm in race.ARMS
            for seed in doc["config"]["reported_seeds"]]
    return stored_results.run_jobs(race._train, jobs, 1, progress=False)


def _on_paths(target: str, kwargs: dict, paths, desc: str) -> dict:
    """``{path: {"result", "machine"}}``, one fresh process per path, with a progress bar."""
    return numerics_paths.run_on_paths(target, kwargs, paths, with_machine=True, desc=desc)


def measure(paths=None, replication_path: str = REPLICATION_PATH,
            epochs: int = race.EPOCHS) -> dict:
    """The measurements: ``{"tolerance": spread_record, "dynamics": {"spread": {setting:
    relative spread}, "values"}, "replication": {...}}``."""
    doc = stored_results.load_results(race.COMMITTED_PATH)
    kwargs = {**CHECK, "lr": doc["selected_lr"][CHECK["arm"]]}
    target = "layernorm_tutorial.lab.rnn.race:retrain"
    values = {p: r["result"] for p, r in _on_paths(
        target, kwargs, paths, "rnn paths: live-check run").items()}
    tolerance = numerics_paths.spread_record(
        f"{CHECK['arm']}, seed {CHECK['seed']}, epoch 1: training loss and accuracies",
        target, kwargs, values)
    tolerance["loss_relative_spread"] = numerics_paths.relative_spread(
        {p: v["train_loss"] for p, v in values.items()})
    dynamics = {p: r["result"] for p, r in _on_paths(
        "layernorm_tutorial.lab.rnn.report:dynamics_summary", {}, paths,
        "rnn paths: dynamics").items()}
    replicated = _on_paths("layernorm_tutorial.lab.rnn.paths:reported_runs",
                           {"epochs": epochs}, [replication_path],
                           "rnn paths: replication")[replication_path]
    keys = next(iter(dynamics.values()))
    return {"tolerance": tolerance,
            "dynamics": {"target": "layernorm_tutorial.lab.rnn.report:dynamics_summary",
                         "spread": {k: numerics_paths.relative_spread(
                             {p: v[k] for p, v in dynamics.items()}) for k in keys},
                         "values": dynamics},
            "replication": {"path": replication_path,
                            "environment": numerics_paths.PATHS[replication_path],
                            "machine": replicated["machine"],
                            "selected_lr": doc["selected_lr"],
                            "runs": replicated["result"]}}


def build_document(measured: dict, seconds: float | None) -> dict:
    config = {"stored_race": race.COMMITTED_PATH.name, "check": CHECK,
              "tolerance_multiple": TOLERANCE_MULTIPLE,
              "replication_path": measured["replication"]["path"]}
    return {**provenance(COMMAND, config, seconds), **measured}


def replicated_doc(paths_doc: dict) -> dict:
    """The replication as a race document (``runs``, ``selected_lr``), so that
    :func:`~.race.verdicts` and :func:`~.race.accuracy_table` read it like the stored race."""
    rep = paths_doc["replication"]
    return {"selected_lr": rep["selected_lr"], "runs": rep["runs"]}


def replication_table(doc: dict, paths_doc: dict, epochs=(1, race.EPOCHS)) -> list[dict]:
    """Per verdict of the chapter: the stored and the replicated verdict, whether the word is
    the same and whether the replicated effect lies inside the stored interval."""
    rows = []
    again = replicated_doc(paths_doc)
    for epoch in epochs:
        stored, other = race.verdicts(doc, epoch), race.verdicts(again, epoch)
        for pair, v in stored.items():
            w = other[pair]
            rows.append({"pair": pair, "epoch": epoch, "stored": v, "replicated": w,
                         "same_word": v.word == w.word,
                         "inside": v.low <= w.effect <= v.high})
    return rows


@dataclass(frozen=True)
class LiveCheck:
    """The chapter's live re-run next to the stored run (both per epoch, here epoch 1)."""

    arm: str
    seed: int
    stored: dict
    here: dict
    spread: float
    allowed: float

    @property
    def loss_difference(self) -> float:
        """Largest relative difference of the training loss, this machine vs the file."""
        return max(abs(a - b) / abs(b) for a, b in zip(self.here["train_loss"],
                                                        self.stored["train_loss"],
                                                        strict=True))

    @property
    def image_difference(self) -> int:
        """Largest difference in correctly classified test images."""
        n = 449
        return max(round(abs(a - b) * n) for a, b in zip(self.here["test_accuracy"],
                                                          self.stored["test_accuracy"],
                                                          strict=True))

    @property
    def within(self) -> bool:
        return self.loss_difference <= self.allowed

    def report(self) -> str:
        s, h = self.stored, self.here
        return "\n".join([
            f"{self.arm}, seed {self.seed}, epoch 1:",
            f"  stored run         training loss {s['train_loss'][0]:.5f}, "
            f"test accuracy {s['test_accuracy'][0]:.4f}",
            f"  this machine's run training loss {h['train_loss'][0]:.5f}, "
            f"test accuracy {h['test_accuracy'][0]:.4f}",
            f"  relative difference of the loss {self.loss_difference:.1e}; allowed "
            f"{self.allowed:.1e}",
            f"  ({TOLERANCE_MULTIPLE} x the spread across numerics paths, "
            f"{self.spread:.1e}, + the file's rounding)"])


def live_check(doc: dict, paths_doc: dict) -> LiveCheck:
    """Retrain :data:`CHECK` here and compare it with the stored reported run."""
    kwargs = paths_doc["tolerance"]["kwargs"]
    arm, seed, epochs = kwargs["arm"], kwargs["seed"], kwargs["epochs"]
    runs = [r for r in doc["runs"] if r["arm"] == arm and r["seed"] == seed
            and r["role"] == "reported"]
    if len(runs) != 1:
        raise ValueError(f"no single reported run for arm {arm!r} and seed {seed}")
    stored = {k: runs[0][k][:epochs] for k in ("train_loss", "test_accuracy")}
    here = race.retrain(arm, runs[0]["lr"], seed, epochs)
    spread = paths_doc["tolerance"]["loss_relative_spread"]
    rounding = 0.5 * 10.0 ** (1 - _DIGITS)
    return LiveCheck(arm, seed, stored, here, spread,
                     TOLERANCE_MULTIPLE * spread + rounding)


def _run(args) -> tuple[dict, str]:
    settings = dict(paths=["native"], epochs=1) if args.tiny else {}
    measured, seconds = stored_results.timed(measure, **settings)
    spread = measured["tolerance"]["loss_relative_spread"]
    return (build_document(measured, seconds),
            f"loss spread {spread:.1e} over {len(measured['tolerance']['values'])} paths, "
            f"{len(measured['replication']['runs'])} runs replicated in {seconds:.0f} s")


def main(argv=None) -> None:
    stored_results.results_command(
        argv, prog=COMMAND, description=__doc__.splitlines()[0],
        default_out=COMMITTED_PATH, tiny_help="smoke run (native path only, one epoch)",
        run=_run, workers=False)


if __name__ == "__main__":
    main()
