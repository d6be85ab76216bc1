"""Does LayerNorm on PyTorch's default initialisation beat He initialisation without it?

The principles chapter shows, on three seeds, that both repair the poor initial scale of an
8-layer MLP on the digits. Whether one is *better* is a comparison, judged here by the
book's verdict method (``lab.common.verdict``): seeds from ``seed_plan`` (two tuning seeds,
five reported), seed ``s`` fixing the train/test split, the initial weights of both arms and
the mini-batch order; each arm's learning rate chosen on the tuning seeds only, by their
accuracy on *validation* images that lie in no reported seed's test set
(:func:`tuning_split`); the paired difference of the final test accuracies on the reported
seeds, with a 95 % t interval, against a threshold of one point fixed before the runs. The
runs take a few minutes of CPU, so ``python -m layernorm_tutorial.lab.principles`` stores
them in ``book/data/``; ``... principles replicate`` re-runs the reported seeds on a second
numerics path (:func:`replicate`).
"""

from __future__ import annotations

import textwrap
import time
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import torch

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA, provenance, run_jobs
from layernorm_tutorial.lab.common.training import DigitsData, load_digits_split, make_mlp
from layernorm_tutorial.lab.common.verdict import (
    MARK,
    Verdict,
    family_marks,
    family_sentence,
    seed_plan,
)
from layernorm_tutorial.lab.principles.init_sensitivity import MLPEnsemble, train_ensemble
from layernorm_tutorial.lab.principles.stored_training import machine_words

__all__ = ["ARMS", "THRESHOLD", "LR_GRID", "COMMAND", "COMMITTED_PATH", "TEST_FRACTION", "CLAIM_ID",
           "split_indices", "tuning_split", "run_comparison", "reported_accuracies",
           "build_document", "verdict_from_document", "REPLICATION_PATH",
           "REPLICATION_COMMAND", "REPLICATION_NUMERICS", "replicate", "Replication",
           "replication_from_documents", "EARLIER_RUN", "StoredComparison", "disclosure",
           "edge_rates"]

#: The two arms as ``make_mlp`` keyword arguments; the claim is that the first beats the second.
ARMS = {"default init + LayerNorm": {"layer_norm": True},
        "He init": {"layer_norm": False, "he_init": True}}
#: The registered claim (``lab.common.claims``) this comparison judges.
CLAIM_ID = "principles.ln-vs-he"
#: Practical size of "beats": one point of test accuracy (a fraction), from the registry.
THRESHOLD = claims.threshold(CLAIM_ID)
#: Learning rates tried on the tuning seeds (SGD with momentum 0.9, batch 64).
LR_GRID = (0.001, 0.002, 0.005, 0.01, 0.02, 0.05)
COMMAND = "python -m layernorm_tutorial.lab.principles"
COMMITTED_PATH = BOOK_DATA / "principles_ln_vs_he.json"
#: ``training.load_digits_split``'s default: a quarter of the 1797 images are test images.
TEST_FRACTION = 0.25


def _digits_tensors() -> tuple[torch.Tensor, torch.Tensor]:
    """All 1797 digits as ``load_digits_split`` scales them: x ``(1797, 64)``, y ``(1797,)``."""
    from sklearn.datasets import load_digits

    digits = load_digits()
    return (torch.tensor(digits.data / 16.0, dtype=torch.float32),
            torch.tensor(digits.target, dtype=torch.int64))


def split_indices(seed: int, n: int = 1797,
                  test_fraction: float = TEST_FRACTION) -> tuple[torch.Tensor, torch.Tensor]:
    """``(train, test)`` image indices of ``load_digits_split(test_fraction, seed)``: the same
    seeded permutation, its first ``round(test_fraction * n)`` entries the test images."""
    order = torch.randperm(n, generator=torch.Generator().manual_seed(seed))
    n_test = int(round(test_fraction * n))
    return order[n_test:], order[:n_test]


def tuning_split(seed: int, reported_seeds: Sequence[int]) -> DigitsData:
    """Tuning seed ``seed``'s data: validation images disjoint from every reported test set.

    The validation set (returned as ``x_test``, ``y_test``) is every image that is in *no*
    reported seed's test set (about ``0.75**5`` of the 1797 for five reported seeds); the
    training set is as large as a reported seed's, drawn with ``seed`` from the other images.
    So a learning rate chosen on it has never been scored on a reported test image.
    """
    x, y = _digits_tensors()
    n = len(y)
    reported_test = torch.zeros(n, dtype=torch.bool)
    for s in reported_seeds:
        reported_test[split_indices(s, n)[1]] = True
    validation = torch.nonzero(~reported_test).flatten()
    rest = torch.nonzero(reported_test).flatten()
    n_train = n - int(round(TEST_FRACTION * n))
    if len(rest) < n_train or len(validation) == 0:
        raise ValueError(f"reported_seeds {list(reported_seeds)} leave {len(validation)} "
                         f"validation and {len(rest)} training images; need >= 1 and "
                         f">= {n_train}")
    pick = torch.randperm(len(rest), generator=torch.Generator().manual_seed(seed))
    train = rest[pick[:n_train]]
    return DigitsData(x[train], y[train], x[validation], y[validation])


def _run_seed(seed: int, runs: list[tuple[str, float]], depth: int, epochs: int,
              data: DigitsData | None = None) -> list[float]:
    """Final accuracy on ``data``'s held-out images (default: seed ``seed``'s own test set)
    of each (arm, lr) run, trained on seed ``seed``'s weights and batch order, as one
    ensemble, single-threaded."""
    torch.set_num_threads(1)
    data = load_digits_split(seed=seed) if data is None else data
    models = [make_mlp(depth, seed=seed, **ARMS[arm]) for arm, _ in runs]
    results = train_ensemble(MLPEnsemble.from_models(models), data, epochs=epochs,
                             lrs=[lr for _, lr in runs], seeds=[seed] * len(runs))
    return [r.test_accuracy for r in results]


def _job(job: tuple) -> list[float]:
    seed, runs, depth, epochs, reported = job
    data = None if reported is None else tuning_split(seed, reported)
    return _run_seed(seed, runs, depth, epochs, data)


def reported_accuracies(lr: dict, seeds: Sequence[int], depth: int = 8,
                        epochs: int = 15) -> dict:
    """``{arm: [test accuracy per seed]}`` of both arms at the rates ``lr`` (arm -> rate) on
    the reported ``seeds``, single-threaded: what a replication on another numerics path
    re-runs (module-level and JSON-able, for ``numerics_paths.run_on_paths``)."""
    arms = list(ARMS)
    final = np.array([_run_seed(s, [(arm, float(lr[arm])) for arm in arms], depth, epochs)
                      for s in seeds])
    return {arm: final[:, k].tolist() for k, arm in enumerate(arms)}


def run_comparison(*, lr_grid: Sequence[float] = LR_GRID, depth: int = 8, epochs: int = 15,
                   n_reported: int = 5, n_tuning: int = 2, first_seed: int = 0,
                   workers: int = 1) -> dict:
    """Train both arms and return a JSON-ready dict.

    Keys: ``arms``, ``lr_grid``, ``tuning_seeds``, ``reported_seeds``, ``validation_images``
    (how many images the tuning runs were scored on: those in no reported test set),
    ``validation_accuracy`` (arm -> one mean validation accuracy over the tuning seeds per
    rate of ``lr_grid``), ``lr`` (arm -> the rate chosen, the first best on ties) and
    ``accuracy`` (arm -> one final test accuracy per reported seed, paired by seed across
    arms). ``workers`` processes share the seeds (one job per seed, single-threaded).
    """
    if not lr_grid:
        raise ValueError("lr_grid must hold at least one learning rate")
    tuning, reported = seed_plan(n_reported, n_tuning, first=first_seed)
    arms = list(ARMS)
    grid_runs = [(arm, lr) for arm in arms for lr in lr_grid]
    tuned = np.array(run_jobs(_job, [(s, grid_runs, depth, epochs, reported) for s in tuning],
                              workers, desc="tuning seeds"))
    tuned = tuned.mean(0).reshape(len(arms), len(lr_grid))
    chosen = {arm: float(lr_grid[int(np.argmax(tuned[k]))]) for k, arm in enumerate(arms)}
    jobs = [(s, [(arm, chosen[arm]) for arm in arms], depth, epochs, None) for s in reported]
    final = np.array(run_jobs(_job, jobs, workers, desc="reported seeds"))
    return {"arms": arms, "lr_grid": [float(lr) for lr in lr_grid],
            "tuning_seeds": list(tuning), "reported_seeds": list(reported),
            "validation_images": len(tuning_split(tuning[0], reported).y_test),
            "validation_accuracy": {arm: tuned[k].tolist() for k, arm in enumerate(arms)},
            "lr": chosen,
            "accuracy": {arm: final[:, k].tolist() for k, arm in enumerate(arms)}}


def build_document(result: dict, seconds: float, config: dict) -> dict:
    """The results file: provenance header, the registered threshold, the runs, and the hash
    of the registry entry it is judged under (``claims.stamp``)."""
    doc = {**provenance(COMMAND, config, seconds), "threshold": THRESHOLD, **result}
    return claims.stamp(doc, [CLAIM_ID])


def verdict_from_document(doc: dict, setting: str = "") -> Verdict:
    """The registered claim judged on the stored accuracies: first arm against second,
    paired by seed (``claims.judge``, verdict method v3)."""
    first, second = doc["arms"]
    return claims.judge(CLAIM_ID, doc["accuracy"][first], doc["accuracy"][second],
                        setting=setting)


def timed_comparison(**settings) -> tuple[dict, float]:
    """``run_comparison(**settings)`` and its wall time in seconds."""
    start = time.perf_counter()
    result = run_comparison(**settings)
    return result, time.perf_counter() - start


# --- the same reported seeds on a second numerics path -------------------------------------

#: Where ``python -m layernorm_tutorial.lab.principles replicate`` stores the replication.
REPLICATION_PATH = BOOK_DATA / "principles_ln_vs_he_replication.json"
REPLICATION_COMMAND = "python -m layernorm_tutorial.lab.principles replicate"
#: The second numerics path (a name of ``lab.common.numerics_paths.PATHS``).
REPLICATION_NUMERICS = "default+compatible"


def replicate(doc: dict, path: str = REPLICATION_NUMERICS) -> dict:
    """Re-run the reported seeds of the stored comparison ``doc`` (both arms at their chosen
    rates) in a fresh process on the numerics path ``path``.

    Returns ``{"numerics_path", "original": {"lr", "accuracy"}, "accuracy", "path_machine",
    "claims"}`` (``accuracy``: arm -> one test accuracy per reported seed on that path;
    ``path_machine``: the child process's ``machine_info``; ``claims``: the hash of the
    registered claim the replication is judged under, :func:`claims.stamp`)."""
    from layernorm_tutorial.lab.common.numerics_paths import run_on_paths

    kwargs = {"lr": doc["lr"], "seeds": doc["reported_seeds"],
              "depth": doc["config"]["depth"], "epochs": doc["config"]["epochs"]}
    out = run_on_paths(f"{__name__}:reported_accuracies", kwargs, [path], with_machine=True)
    return claims.stamp({"numerics_path": path,
                         "original": {"lr": doc["lr"], "accuracy": doc["accuracy"]},
                         "accuracy": out[path]["result"], "path_machine": out[path]["machine"]},
                        [CLAIM_ID])


@dataclass(frozen=True)
class Replication:
    """The stored verdict next to the same judgement on the second path's accuracies."""

    original: Verdict
    replicated: Verdict
    path: str

    @property
    def same_word(self) -> bool:
        return self.original.word == self.replicated.word

    @property
    def effect_inside(self) -> bool:
        """The replicated mean effect lies inside the original 95 % interval."""
        return self.original.low <= self.replicated.effect <= self.original.high

    @property
    def holds_up(self) -> bool:
        return self.same_word and self.effect_inside

    def text(self, digits: int = 1, scale: float = 100.0, unit: str = " pts") -> str:
        return (f"stored run:          {self.original.text(digits, scale, unit)}\n"
                f"path {self.path}: {self.replicated.text(digits, scale, unit)}\n"
                f"same word: {self.same_word}; replicated effect inside the stored "
                f"interval: {self.effect_inside}")


def replication_from_documents(doc: dict, replication: dict) -> Replication:
    """Judge both; ``ValueError`` if ``replication`` was made from other stored results."""
    if replication["original"] != {"lr": doc["lr"], "accuracy": doc["accuracy"]}:
        raise ValueError("the replication re-ran other stored results: run "
                         f"{REPLICATION_COMMAND} --force")
    again = {**doc, "accuracy": replication["accuracy"]}
    path = replication["numerics_path"]
    return Replication(verdict_from_document(doc),
                       verdict_from_document(again, setting=f"numerics path {path}"), path)


#: The run this chapter stored before the numerics paths and the validation split (commit
#: ca7ff54, 2026-11-25, another CPU): rates chosen on the tuning seeds' *test* accuracy,
#: whose images overlap the reported test sets. Kept to show what re-running changed.
EARLIER_RUN = {"commit": "ca7ff54",
               "lr": {"default init + LayerNorm": 0.002, "He init": 0.01},
               "accuracy": {"default init + LayerNorm": [0.97773, 0.96437, 0.94655, 0.96659,
                                                         0.97327],
                            "He init": [0.96659, 0.93541, 0.94432, 0.95768, 0.95323]}}


def edge_rates(doc: dict) -> dict[str, float]:
    """``{arm: chosen rate}`` for each arm whose chosen rate sits at an end of the grid
    (the grid may have cut off its best rate; the rule does not extend this grid)."""
    grid = doc["lr_grid"]
    return {a: doc["lr"][a] for a in doc["arms"]
            if grid.index(doc["lr"][a]) in (0, len(grid) - 1)}


def _runs_lines(d: dict) -> list[str]:
    """The tuning accuracies per rate, the chosen rates and the reported test accuracies."""
    lines = [f"rates chosen on tuning seeds {_ids(d['tuning_seeds'])} by the accuracy "
             f"(%) on {d['validation_images']}",
             "validation images that lie in no reported seed's test set:"]
    for arm in d["arms"]:
        acc = " ".join(f"{100 * a:4.1f}" for a in d["validation_accuracy"][arm])
        lines.append(f"  {arm:24s} {acc} -> lr {d['lr'][arm]:g}")
    lines.append(f"  (grid: {', '.join(f'{lr:g}' for lr in d['lr_grid'])})")
    for arm, lr in edge_rates(d).items():
        lines.append(_wrap(f"{arm}: the chosen rate {lr:g} is an end of the grid (the "
                           "rule takes the first best rate on ties and does not extend "
                           "the grid)"))
    lines.append(textwrap.fill(f"test accuracy (%) on reported seeds "
                               f"{_ids(d['reported_seeds'])}, each with its own split:", 80))
    for arm in d["arms"]:
        acc = " ".join(f"{100 * a:4.1f}" for a in d["accuracy"][arm])
        lines.append(f"  {arm:24s} {acc}")
    return lines


class StoredComparison:
    """The stored comparison and its replication as the chapter shows them: the tuning and
    test accuracies (:meth:`table`, within 80 columns), the verdict with the mark of the
    family's correction and its registration, the replication, and the values the prose
    glues (:meth:`glue_values`).

    ``confirmatory``: the confirmatory run on fresh seeds
    (``book/data/principles_ln_vs_he_confirmatory.json``, registered before its runs).
    With it, its verdict is the chapter's (:meth:`confirmatory_table`), and the stored
    run's verdict is printed beside it as exploratory (its threshold was committed together
    with its data). The principles chapter judges one claim, so its family is one verdict."""

    def __init__(self, doc: dict, replication: dict, confirmatory: dict | None = None):
        self.doc = doc
        self.verdict = verdict_from_document(doc)
        self.replication = replication_from_documents(doc, replication)
        self.confirmatory = confirmatory
        if confirmatory is not None:
            if not confirmatory.get("confirmatory"):
                raise ValueError("confirmatory must be a confirmatory results file "
                                 "(python -m layernorm_tutorial.lab.confirmatory principles)")
            self.confirmatory_verdict = verdict_from_document(confirmatory)
            self.mark = family_marks([self.confirmatory_verdict])[0]
        else:
            self.confirmatory_verdict = None
            self.mark = family_marks([self.verdict])[0]

    def rates_inside_grid(self) -> bool:
        """Neither arm's chosen rate in the stored run sits at an end of the grid."""
        return not edge_rates(self.doc)

    def chapter_verdict(self) -> Verdict:
        """The chapter's verdict: the confirmatory one when given, else the stored run's."""
        return self.verdict if self.confirmatory is None else self.confirmatory_verdict

    def verdict_text(self) -> str:
        """The chapter's verdict with its mark (:meth:`chapter_verdict`)."""
        mark = MARK + " " if self.mark else ""
        return mark + self.chapter_verdict().text(1, 100, " pts")

    def earlier_text(self) -> str:
        """The stored (earlier) run's verdict, marked exploratory when a confirmatory run
        is given."""
        v = self.verdict
        if self.confirmatory is not None:
            v = Verdict(**{**v.__dict__, "exploratory": True})
        return v.text(1, 100, " pts")

    def table(self) -> str:
        """The stored run: rates, accuracies, registration, disclosure and its verdict (the
        chapter's, or with a confirmatory run the earlier one, exploratory)."""
        d = self.doc
        lines = _runs_lines(d)
        lines += [f"claim {CLAIM_ID}: threshold {100 * THRESHOLD:g} point",
                  _wrap(claims.registration_note(CLAIM_ID, d)),
                  _wrap(disclosure())]
        if self.confirmatory is None:
            lines += [f"verdict: {self.verdict_text()}",
                      _wrap(family_sentence([self.verdict]))]
        else:
            lines.append(f"verdict: {self.earlier_text()}")
        return "\n".join(lines)

    def confirmatory_table(self) -> str:
        """The confirmatory run: rates chosen again on its fresh tuning seeds (and the arms
        whose rate sits at an end of the grid), accuracies on its fresh reported seeds, its
        registration line, and the chapter's verdict with the stored run's beside it."""
        if self.confirmatory is None:
            raise ValueError("no confirmatory run: pass confirmatory=")
        c = self.confirmatory
        lines = _runs_lines(c)
        lines += [_wrap(claims.registration_note(CLAIM_ID, c)),
                  f"confirmatory: {self.verdict_text()}",
                  f"earlier run:  {self.earlier_text()}",
                  _wrap(family_sentence([self.confirmatory_verdict]))]
        return "\n".join(lines)

    def replication_sentence(self) -> str:
        r = self.replication
        if r.holds_up:
            return ("the same word, with the effect inside the stored interval: the verdict "
                    "does not depend on the arithmetic")
        if r.effect_inside:
            return ("a different word, although the effect lies inside the stored interval: "
                    "the word depends on the last bits of the arithmetic, so the book does "
                    "not count the claim as established")
        return ("an effect outside the stored interval: the verdict depends on the "
                "arithmetic, so the book does not count the claim as established")

    def earlier_verdict(self) -> Verdict:
        """:data:`EARLIER_RUN` judged by today's rule (verdict method v3)."""
        return verdict_from_document({**self.doc, "accuracy": EARLIER_RUN["accuracy"]})

    def conclusion(self) -> str:
        """What the chapter may conclude: a claim holds only if it holds on both paths."""
        if self.verdict.word == "holds" and self.replication.holds_up:
            return ("at its own rate the LN network reached a higher test accuracy than He "
                    "initialisation, by at least the threshold, on both numerics paths")
        if self.verdict.word == "too small to matter" and self.replication.holds_up:
            return ("at their own rates the two reached test accuracies within the "
                    "threshold of each other, on both numerics paths")
        return ("this comparison does not establish that either is better on this network: "
                "it did not show a difference that survives a change of arithmetic")

    def glue_values(self) -> dict:
        """The values the prose quotes: ``lnhe_verdict`` (the chapter's verdict, with its
        mark), ``lnhe_word``, the stored run's settings and replication, and with a
        confirmatory run ``lnhe_stored_verdict`` (the stored run's, exploratory) and
        ``lnhe_conf_*`` (its seeds, validation images and chosen rates)."""
        d, r = self.doc, self.replication
        arm_ln, arm_he = d["arms"]
        runs = 2 * len(d["reported_seeds"]) + 2 * len(d["tuning_seeds"]) * len(d["lr_grid"])
        conf = {}
        if self.confirmatory is not None:
            c = self.confirmatory
            conf = {"lnhe_stored_verdict": self.earlier_text(),
                    "lnhe_conf_tuning_seeds": _ids(c["tuning_seeds"]),
                    "lnhe_conf_reported_seeds": _ids(c["reported_seeds"]),
                    "lnhe_conf_validation_images": c["validation_images"],
                    "lnhe_conf_lr_ln": f"{c['lr'][arm_ln]:g}",
                    "lnhe_conf_lr_he": f"{c['lr'][arm_he]:g}"}
        values = {"lnhe_runs": runs,
                  "lnhe_grid": ", ".join(f"{lr:g}" for lr in d["lr_grid"]),
                  "lnhe_tuning_seeds": _ids(d["tuning_seeds"]),
                  "lnhe_reported_seeds": _ids(d["reported_seeds"]),
                  "lnhe_validation_images": d["validation_images"],
                  "lnhe_lr_ln": f"{d['lr'][arm_ln]:g}", "lnhe_lr_he": f"{d['lr'][arm_he]:g}",
                  "lnhe_verdict": self.verdict_text(),
                  "lnhe_word": self.chapter_verdict().word,
                  "lnhe_rep_path": r.path,
                  "lnhe_rep_verdict": r.replicated.text(1, 100, " pts"),
                  "lnhe_machine": machine_words(d),
                  "lnhe_earlier_commit": EARLIER_RUN["commit"],
                  "lnhe_earlier_verdict": self.earlier_verdict().text(1, 100, " pts")}
        return conf | values


def disclosure() -> str:
    """The registry's disclosure for this chapter (``claims.DISCLOSURES``): the threshold
    was committed together with the earlier run's data."""
    lines = [d for d in claims.DISCLOSURES if d.startswith("principles:")]
    if len(lines) != 1:
        raise LookupError(f"expected one principles disclosure, found {len(lines)}")
    return "disclosed: " + lines[0].removeprefix("principles: ")


def _wrap(text: str) -> str:
    return textwrap.fill(text, 78, initial_indent="  ", subsequent_indent="  ")


def _ids(seeds) -> str:
    return ", ".join(str(s) for s in seeds)
