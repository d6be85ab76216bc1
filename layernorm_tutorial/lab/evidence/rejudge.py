"""Every stored verdict of the book, judged by each version of the verdict rule.

- **v1** (until issue 34): *holds* when the interval lies above 0 and the mean reaches the
  threshold; *contradicted* when the interval lies below 0 (no threshold); *not shown*
  otherwise; learning-rate ladders judged by a t interval on the log rung values; no marks.
- **v2** (issues 34 to 42): symmetric words and *too small to matter*; *holds* when the
  interval lies above 0 and the estimate reaches the threshold (ladders: the median's lower
  bound), ladders interval-censored; Holm marks, *holds* and *contradicted* tested against 0.
- **v3** (issue 42, :mod:`layernorm_tutorial.lab.common.verdict`): the word follows the
  interval alone (*holds* needs ``L >= delta``; *direction shown* and *reverse shown* where
  the interval excludes 0 but not the threshold); each word's own test; Bonferroni marks.

The verdicts are the ones the chapters print now, from the results files in ``book/data``
as they are (re-runs included), computed by the chapters' own lab functions: each chapter's
family, its exploratory results and its replications on a second numerics path (those two
are outside the family and carry no mark). Each item names its ``run``: ``"earlier"`` (the
chapters' first stored results, judged as their family was before the confirmatory runs) or
``"confirmatory"`` (the runs on fresh seeds registered before they started,
``book/data/*_confirmatory.json``: the chapters' families now). The marks are computed per
chapter and run; the large-models chapter's confirmatory family also counts its five
verdicts without a confirmatory run (timing, logit tools), as the chapter does.
``python -m layernorm_tutorial.lab.evidence.rejudge`` stores the list in
``book/data/evidence_rejudged.json`` for the evidence chapter.
"""

from __future__ import annotations

import hashlib
import math
import sys
import textwrap
import time

import numpy as np

from layernorm_tutorial._cli import StoredFileError, interruptible, output_path
from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.stored_results import (
    BOOK_DATA,
    load_results,
    output_path_from_args,
    provenance,
    save_results,
)
from layernorm_tutorial.lab.common.verdict import (
    CONTRADICTED,
    HOLDS,
    METHOD_VERSION,
    NOT_SHOWN,
    TOO_SMALL,
    LadderVerdict,
    Verdict,
    family_marks,
    holm_adjusted,
    paired_verdict,
    sign_test_p,
    t_p_values,
)

__all__ = ["VERSIONS", "v1_word", "v1_verdict", "v2_word", "v2_judgement", "rejudge_evidence",
           "rejudge_principles", "rejudge_rnn", "rejudge_residual", "rejudge_large_models",
           "rejudge_all", "with_marks", "changed", "load_rejudged", "changed_table",
           "count_table", "SOURCES", "RUNS", "COMMITTED_PATH", "COMMAND",
           "rejudge_large_models_confirmatory", "large_models_others"]

COMMITTED_PATH = BOOK_DATA / "evidence_rejudged.json"
COMMAND = "python -m layernorm_tutorial.lab.evidence.rejudge"
VERSIONS = ("v1", "v2", "v3")
#: The results files the verdicts are computed from (hashed into the stored list).
SOURCES = ("evidence_results.json", "evidence_side_results.json",
           "evidence_live_checks.json", "principles_ln_vs_he.json",
           "principles_ln_vs_he_replication.json", "rnn_race.json", "rnn_paths.json",
           "residual_runs.json", "residual_paths.json", "large_models_results.json",
           "evidence_confirmatory.json", "evidence_side_confirmatory.json",
           "principles_ln_vs_he_confirmatory.json", "rnn_race_confirmatory.json",
           "residual_runs_confirmatory.json", "large_models_confirmatory.json",
           "large_models_qk_confirmatory.json")
#: The two kinds of run an item comes from (see the module docstring).
RUNS = ("earlier", "confirmatory")


# ---- the earlier rules ---------------------------------------------------------------------


def v1_word(low: float, high: float, mean: float, threshold: float) -> str:
    """The first rule: holds (low > 0 and mean >= threshold), contradicted (high < 0),
    not shown."""
    if low > 0 and mean >= threshold:
        return HOLDS
    if high < 0:
        return CONTRADICTED
    return NOT_SHOWN


def v1_verdict(claimed, baseline, threshold: float, higher_is_better: bool = True) -> Verdict:
    """A paired t verdict with the first rule's word (the interval is the same)."""
    v = paired_verdict(claimed, baseline, threshold=threshold,
                       higher_is_better=higher_is_better)
    return Verdict(**{**v.__dict__, "word": v1_word(v.low, v.high, v.effect, threshold)})


def v2_word(low: float, high: float, estimate_low: float, estimate_high: float,
            threshold: float) -> str:
    """The second rule: holds (``L > 0`` and the estimate, known to lie in ``[estimate_low,
    estimate_high]``, at least delta), contradicted (the mirror), too small to matter
    (``-delta < L`` and ``H < delta``), not shown."""
    if low > 0 and estimate_low >= threshold:
        return HOLDS
    if high < 0 and estimate_high <= -threshold:
        return CONTRADICTED
    if -threshold < low and high < threshold:
        return TOO_SMALL
    return NOT_SHOWN


def v2_judgement(v: Verdict | LadderVerdict) -> tuple[str, float]:
    """``(word, p)`` of the second rule for a verdict of the current one (same data, same
    interval): the p behind holds and contradicted was the test of zero."""
    if isinstance(v, LadderVerdict):
        tiny = math.ulp(1.0)
        word = v2_word(tiny if v.low == 0 else v.low, -tiny if v.high == 0 else v.high,
                       v.median_low, v.median_high, v.threshold)
        lo = np.array([b[0] for b in v.bounds])
        hi = np.array([b[1] for b in v.bounds])
        p_zero = sign_test_p(max(int((lo >= 0).sum()), int((hi <= 0).sum())), v.n)
        p_eq = max(sign_test_p(int((hi <= v.threshold).sum()), v.n),
                   sign_test_p(int((lo >= -v.threshold).sum()), v.n))
    else:
        word = v2_word(v.low, v.high, v.effect, v.effect, v.threshold)
        p = t_p_values(v.differences, v.threshold)
        p_zero, p_eq = p["zero"], p["equivalence"]
    if word in (HOLDS, CONTRADICTED):
        return word, p_zero
    return word, (p_eq if word == TOO_SMALL else min(p_zero, p_eq))


# ---- one item per verdict --------------------------------------------------------------------

_PTS = {"digits": 1, "scale": 100, "unit": " pts"}
_NATS = {"digits": 2, "unit": " nats"}
_LADDER = {"digits": 2}


def _item(chapter: str, setting: str, v: Verdict | LadderVerdict, fmt: dict,
          v1: Verdict | None = None, family: bool = True, run: str = "earlier") -> dict:
    """One verdict under the three rules. ``v``: the current (v3) verdict; ``v1``: the first
    rule's verdict where its interval differs (ladders: a t interval on log rung values);
    ``family``: whether the verdict belongs to its chapter's family of its ``run``
    (replications and exploratory results do not)."""
    if run not in RUNS:
        raise ValueError(f"run must be one of {RUNS}, got {run!r}")
    if v1 is None:
        v1 = Verdict(**{**v.__dict__, "word": v1_word(v.low, v.high, v.effect, v.threshold)})
        v1_text = v1.text(**fmt)
    else:
        v1_text = v1.text(fmt.get("digits", 2), unit=fmt.get("unit", ""))
    word2, p2 = v2_judgement(v)
    text3 = v.text(**fmt)
    head = "exploratory, " if v.exploratory else ""
    return {"chapter": chapter, "run": run, "claim_id": v.claim_id, "setting": setting,
            "family": family and not v.exploratory, "exploratory": v.exploratory,
            "v1": v1.word, "v1_text": v1_text,
            "v2": word2, "v2_text": head + word2 + text3[len(head) + len(v.word):],
            "v3": v.word, "v3_text": text3, "v2_p": p2, "v3_p": v.p, "_verdict": v}


def _ladder_v1(points_a, points_b, threshold: float, base: float) -> Verdict:
    """The first rule on ladders: a t verdict on the log rung values."""
    log = np.log2 if base == 2 else np.log10
    return v1_verdict(log(np.asarray(points_a, float)), log(np.asarray(points_b, float)),
                      threshold)


def rejudge_evidence(doc: dict, side: dict, live: dict | None = None,
                     run: str = "earlier") -> list[dict]:
    """Every verdict the evidence chapter prints: the 32 rows of its table (the family),
    then, for the earlier run, the exploratory ones (BN against LN in speed, the
    recalibrated BN when ``live`` is given, the batch-256 validation split and the per-digit
    breakdown). ``run="confirmatory"``: ``doc`` and ``side`` are the confirmatory files; the
    32 rows only."""
    from layernorm_tutorial.lab.evidence import analysis, side_experiments
    from layernorm_tutorial.lab.evidence.results import find_runs

    out = []
    for r in analysis.verdict_rows(doc):
        v = r["verdict"]
        setting = f"{r['claim']}: {r['setting']}"
        if isinstance(v, LadderVerdict):
            exp = "lr_range_" + r["setting"][:3].lower()
            norm = "ln" if r["claim"].startswith("5. LN") else "bn"
            field = "largest_good" if "largest" in r["setting"] else "failure"
            a, b = (analysis.rate_range(doc, exp, n) for n in (norm, "none"))
            old = _ladder_v1(getattr(a, field), getattr(b, field), v.threshold, 2)
            out.append(_item("evidence", setting, v, _LADDER, v1=old, run=run))
            continue
        steps = "steps" in r["setting"]
        out.append(_item("evidence", setting, v,
                         {"digits": 0, "unit": " steps"} if steps else _PTS, run=run))
    init = side_experiments.init_scale_result(side)
    combo = side_experiments.combination_result(side)
    for r in analysis.side_verdict_rows(init, combo):
        out.append(_item("evidence", f"{r['claim']}: {r['setting']}", r["verdict"], _PTS,
                         run=run))
    if run == "confirmatory":
        return out
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN")):
        budget = find_runs(doc, exp, "ln", 32)[0]["steps"]
        a, b = analysis.paired_values(doc, exp, "bn", "ln", 32, "steps_to_90")
        v = claims.judge("evidence.x.bn-vs-ln-speed", a, b, budget=budget)
        out.append(_item("evidence", f"BN faster than LN, {name}, batch 32", v,
                         {"digits": 0, "unit": " steps"}))
    if live is not None:
        recal = np.array(live["checks"]["reruns"]["paths"]["native"]["recalibrated"])
        ln = analysis.values(find_runs(doc, "mlp_batch_size", "ln", 256), "test_acc")
        out.append(_item("evidence", "MLP, batch 256, recalibrated BN vs LN",
                         claims.judge("evidence.x.recalibrated-bn", recal, ln), _PTS))
    a, b = analysis.paired_values(doc, "mlp_batch_size", "bn", "ln", 256, "val_acc")
    out.append(_item("evidence", "MLP, batch 256, BN vs LN, validation",
                     claims.judge("evidence.x.batch-256-splits", a, b), _PTS))
    for split in ("val", "test"):
        for c, v in enumerate(analysis.per_class_verdicts(doc, "mlp_batch_size", "bn", "ln",
                                                          256, split)):
            out.append(_item("evidence", f"MLP, batch 256, BN vs LN, digit {c} ({split})",
                             v, _PTS))
    return out


def rejudge_principles(doc: dict, replication: dict | None = None,
                       run: str = "earlier") -> list[dict]:
    """The principles chapter's one verdict, and its replication on a second path."""
    from layernorm_tutorial.lab.principles import ln_vs_he

    v = ln_vs_he.verdict_from_document(doc)
    first, second = doc["arms"]
    out = [_item("principles", f"{first} vs {second}", v, _PTS, run=run)]
    if replication is not None:
        rep = ln_vs_he.replication_from_documents(doc, replication)
        out.append(_item("principles", f"{first} vs {second}, path {rep.path}",
                         rep.replicated, _PTS, family=False))
    return out


def rejudge_rnn(doc: dict, paths_doc: dict | None = None, run: str = "earlier") -> list[dict]:
    """The 24 verdicts of the RNN race (4 comparisons x 6 epochs), then the replicated
    verdicts (epochs 1 and 6) on the second path."""
    from layernorm_tutorial.lab.rnn import paths, race

    out = []
    for epoch in range(1, race.doc_epochs(doc) + 1):
        for (a, b), v in race.verdicts(doc, epoch).items():
            out.append(_item("rnn", f"{a} beats {b}, epoch {epoch}", v, _PTS, run=run))
    if paths_doc is not None:
        for r in paths.replication_table(doc, paths_doc):
            a, b = r["pair"]
            out.append(_item("rnn", f"{a} beats {b}, epoch {r['epoch']}, second path",
                             r["replicated"], _PTS, family=False))
    return out


def rejudge_residual(doc: dict, paths_doc: dict | None = None,
                     run: str = "earlier") -> list[dict]:
    """The 9 verdicts of the residual chapter (6 schedules, 3 depths), then their
    replications on the second path."""
    from layernorm_tutorial.lab.residual import paths, sweep

    out = [_item("residual", label, v, _NATS, run=run)
           for label, v in sweep.all_verdicts(doc).items()]
    if paths_doc is not None:
        out += [_item("residual", f"{r['label']}, second path", r["replicated"], _NATS,
                      family=False) for r in paths.replication_table(doc, paths_doc)]
    return out


def rejudge_large_models(doc: dict) -> list[dict]:
    """The 13 verdicts of the large-models chapter's table, computed as its cells do, then
    the QK-norm ladder on the second path."""
    from layernorm_tutorial.lab.large_models import page
    from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

    out = []
    for arm, v in page.norm_verdicts(doc["comparisons"]["main"]).items():
        out.append(_item("large_models", f"{arm} vs layernorm", v, _PTS))
    alpha = {a: np.array(x) for a, x in doc["comparisons"]["alpha"]["accuracy"].items()}
    for a in alpha:
        if a != "0.5":
            v = claims.judge("large_models.dyt-alpha", alpha["0.5"], alpha[a], setting=f"vs {a}")
            out.append(_item("large_models", f"alpha_init 0.5 vs {a}", v, _PTS))
    for who, s in doc["timing"]["summary"].items():
        ratio = np.asarray(s["ratio"])
        v = claims.judge("large_models.time", ratio, np.ones_like(ratio), setting=who)
        out.append(_item("large_models", f"{who} rms_norm faster than layer_norm (relative)",
                         v, {"digits": 2}))
    ladder = _qk_ladder_item
    sweep = summarize_sweep(doc["qk_norm"])
    for claim_id, arm in (("large_models.qk-norm", "rmsnorm"),
                          ("large_models.logit-tools", "softcap"),
                          ("large_models.logit-tools", "zloss"),
                          ("large_models.logit-tools", "qkclip")):
        out.append(ladder(sweep, claim_id, arm, f"{arm} vs none (largest stable rate)"))
    for key, v in page.deepnorm_verdicts(doc["deepnorm"]).items():
        out.append(_item("large_models", f"DeepNorm: {key}", v, _PTS))
    if "replication" in doc:   # the QK-norm ladder on the second path, as page.replication
        rep = doc["replication"]
        runs = {arm: {lr: [{"final_loss": x, "accuracy": math.nan, "max_logit": [math.nan]}
                           for x in finals] for lr, finals in by_lr.items()}
                for arm, by_lr in rep["final_loss"].items()}
        settings = {**doc["qk_norm"]["settings"], "seeds": rep["kwargs"]["seeds"]}
        again = summarize_sweep({"settings": settings, "runs": runs})
        item = ladder(again, "large_models.qk-norm", "rmsnorm",
                      f"rmsnorm vs none (largest stable rate), path {rep['path']}", False)
        assert item["v3_text"] == page.replication(doc)["replicated"].text(2)
        out.append(item)
    return out


def _qk_ladder_item(sweep, claim_id: str, arm: str, setting: str, family: bool = True,
                    run: str = "earlier") -> dict:
    """A QK-norm or logit-tool ladder verdict of ``sweep`` (``summarize_sweep``) as an item,
    with the first rule's t verdict on the last rung that trained."""
    floor = sweep.lrs[0] / math.sqrt(10)

    def last_stable(a):   # the first rule's point values: the last rung that trained
        return [lo if lo > 0 else floor for lo, _ in sweep.bounds(a)]

    v = sweep.judge(claim_id, arm)
    old = _ladder_v1(last_stable(arm), last_stable("none"), v.threshold, 10)
    return _item("large_models", setting, v, _LADDER, v1=old, family=family, run=run)


def rejudge_large_models_confirmatory(conf: dict, qk_conf: dict) -> list[dict]:
    """The 8 large-models verdicts with a confirmatory run, judged on it as the chapter does
    (``conf``: ``large_models_confirmatory.json``, ``qk_conf``:
    ``large_models_qk_confirmatory.json``), with the earlier items' labels."""
    from layernorm_tutorial.lab.large_models import page
    from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

    run = "confirmatory"
    out = [_item("large_models", f"{arm} vs layernorm", v, _PTS, run=run)
           for arm, v in page.norm_verdicts(conf["comparisons"]["main"]).items()]
    alpha = {a: np.array(x) for a, x in conf["comparisons"]["alpha"]["accuracy"].items()}
    out += [_item("large_models", f"alpha_init 0.5 vs {a}",
                  claims.judge("large_models.dyt-alpha", alpha["0.5"], alpha[a],
                               setting=f"vs {a}"), _PTS, run=run)
            for a in alpha if a != "0.5"]
    out += [_item("large_models", f"DeepNorm: {key}", v, _PTS, run=run)
            for key, v in page.deepnorm_verdicts(conf["deepnorm"]).items()]
    out.append(_qk_ladder_item(summarize_sweep(qk_conf["qk_norm"]), "large_models.qk-norm",
                               "rmsnorm", "rmsnorm vs none (largest stable rate)", run=run))
    return out


def large_models_others(doc: dict) -> list:
    """The large-models verdicts without a confirmatory run (timing, torch and package; the
    three logit tools), judged on the stored results: they count in the chapter's family
    next to the confirmatory verdicts."""
    from layernorm_tutorial.lab.large_models import page
    from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

    sweep = summarize_sweep(doc["qk_norm"])
    return [*page.speed_verdicts(doc["timing"]).values(),
            *(sweep.judge("large_models.logit-tools", arm)
              for arm in ("softcap", "zloss", "qkclip"))]


def with_marks(items: list[dict], others: dict | None = None) -> list[dict]:
    """``v2_mark`` (Holm, version 2) and ``v3_mark`` (Bonferroni, version 3) added to every
    item: its word survives the correction over its chapter's family of its run (items
    outside the family: ``False``). ``others``: ``{(chapter, run): [verdicts]}`` that count
    in that family without being items (the large-models verdicts without a confirmatory
    run, which its confirmatory family includes)."""
    others = others or {}
    marks: dict[int, tuple[bool, bool]] = {}
    groups = dict.fromkeys((i["chapter"], i.get("run", "earlier")) for i in items)
    for key in groups:
        group = [k for k, i in enumerate(items)
                 if (i["chapter"], i.get("run", "earlier")) == key and i["family"]]
        extra = list(others.get(key, ()))
        holm2 = holm_adjusted([items[k]["v2_p"] for k in group]
                              + [v2_judgement(v)[1] for v in extra])
        marks3 = family_marks([items[k]["_verdict"] for k in group] + extra)
        for k, adj, m3 in zip(group, holm2, marks3, strict=False):
            marks[k] = (items[k]["v2"] != NOT_SHOWN and adj <= 0.05, m3)
    out = []
    for k, i in enumerate(items):
        m2, m3 = marks.get(k, (False, False))
        out.append({**{key: x for key, x in i.items() if key != "_verdict"},
                    "v2_mark": m2, "v3_mark": m3})
    return out


def _load(name: str) -> dict:
    """A results file with the provenance header, checked by its loader."""
    return load_results(BOOK_DATA / name)


def rejudge_all() -> list[dict]:
    """Every stored verdict of the book under the three rules, with the marks of v2 and v3
    (see the module docstring): the earlier runs' items, then the confirmatory runs'."""
    from layernorm_tutorial.lab.evidence import live_checks, results, side_experiments

    large = _load("large_models_results.json")
    earlier = (rejudge_evidence(results.load_results(), side_experiments.load_side_results(),
                                live_checks.load_live_checks())
               + rejudge_principles(_load("principles_ln_vs_he.json"),
                                    _load("principles_ln_vs_he_replication.json"))
               + rejudge_rnn(_load("rnn_race.json"), _load("rnn_paths.json"))
               + rejudge_residual(_load("residual_runs.json"), _load("residual_paths.json"))
               + rejudge_large_models(large))
    run = "confirmatory"
    confirmatory = (
        rejudge_evidence(_load("evidence_confirmatory.json"),
                         _load("evidence_side_confirmatory.json"), run=run)
        + rejudge_principles(_load("principles_ln_vs_he_confirmatory.json"), run=run)
        + rejudge_rnn(_load("rnn_race_confirmatory.json"), run=run)
        + rejudge_residual(_load("residual_runs_confirmatory.json"), run=run)
        + rejudge_large_models_confirmatory(_load("large_models_confirmatory.json"),
                                            _load("large_models_qk_confirmatory.json")))
    return with_marks(earlier + confirmatory,
                      others={("large_models", run): large_models_others(large)})


def changed(items: list[dict], old: str = "v2", new: str = "v3",
            run: str | None = None) -> list[dict]:
    """The items whose word differs between the versions ``old`` and ``new`` (``run``: only
    the items of that run)."""
    return [i for i in items if i[old] != i[new]
            and (run is None or i.get("run", "earlier") == run)]


def load_rejudged(path=COMMITTED_PATH) -> list[dict]:
    """The stored list (provenance header and ``items`` checked; a broken file is one line
    naming it and what to do)."""
    return load_results(path, command=COMMAND, sections={"items": list})["items"]


def _mark(item: dict, version: str) -> str:
    return "† " if item.get(f"{version}_mark") else ""


def changed_table(items: list[dict], old: str = "v2", new: str = "v3", width: int = 80,
                  chapters=None, run: str | None = None) -> str:
    """The words that differ between two versions, one entry per verdict (chapter, run when
    confirmatory, setting, old word with its mark, new word with its mark and interval),
    wrapped to ``width`` columns; ``chapters``: only those; ``run``: only that run."""
    lines = []
    for i in changed(items, old, new, run):
        if chapters is not None and i["chapter"] not in chapters:
            continue
        where = "" if i["family"] else " [outside the family]"
        head = (f"{i['chapter']}, confirmatory" if i.get("run") == "confirmatory"
                else i["chapter"])
        lines += textwrap.wrap(f"{head}: {i['setting']}{where}", width)
        lines += textwrap.wrap(f"{_mark(i, old)}{i[old]} -> {_mark(i, new)}{i[new + '_text']}",
                               width, initial_indent="    ", subsequent_indent="      ")
    return "\n".join(lines)


def count_table(items: list[dict]) -> str:
    """Per chapter and run: verdicts (in the family), words that change from v1 to v2 and
    from v2 to v3, and the marked words under v2 (Holm) and v3 (Bonferroni)."""
    rows = [f"{'chapter':<13}{'run':<9}{'verdicts':>8}{'family':>7}{'v1->v2':>8}{'v2->v3':>8}"
            f"{'marked v2':>11}{'marked v3':>11}"]
    for chapter, run in dict.fromkeys((i["chapter"], i.get("run", "earlier")) for i in items):
        group = [i for i in items
                 if i["chapter"] == chapter and i.get("run", "earlier") == run]
        fam = [i for i in group if i["family"]]
        short = "confirm." if run == "confirmatory" else run
        rows.append(f"{chapter:<13}{short:<9}{len(group):>8}{len(fam):>7}"
                    f"{sum(i['v1'] != i['v2'] for i in group):>8}"
                    f"{sum(i['v2'] != i['v3'] for i in group):>8}"
                    f"{sum(i['v2_mark'] for i in fam):>11}{sum(i['v3_mark'] for i in fam):>11}")
    return "\n".join(rows)


def _hashes() -> dict[str, str]:
    """The first 12 hex digits of the SHA-256 of each source file."""
    return {name: hashlib.sha256((BOOK_DATA / name).read_bytes()).hexdigest()[:12]
            for name in SOURCES}


@interruptible
def main(argv=None) -> int:
    """Re-judge the stored results and write them (``--out``, default the book's file; no
    other file of the repository, never an input). A missing or broken input is one line,
    exit status 2; Ctrl-C prints ``interrupted``, status 130."""
    import argparse

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=output_path, default=None,
                        help="where to write (default: book/data)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    path = output_path_from_args(parser, args, COMMITTED_PATH)
    start = time.perf_counter()
    try:
        items = rejudge_all()
    except StoredFileError as err:  # an input (a results file, the registry) is broken
        parser.error(str(err))
    doc = {**provenance(COMMAND, {"method_version": METHOD_VERSION,
                                  "results_judged": _hashes(),
                                  "claims_registry": {c.id: claims.definition_hash(c.id)
                                                      for c in claims.CLAIMS}},
                        time.perf_counter() - start),
           "items": items}
    save_results(doc, path, overwrite=args.force)
    print(f"{len(items)} stored verdicts; written to {path}")
    print(count_table(items))
    return 0


if __name__ == "__main__":
    sys.exit(main())
