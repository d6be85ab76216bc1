"""Every stored verdict of the book, judged by the first verdict rule and by the second.

The first rule (until issue 34): *holds* when the interval lies above 0 and the mean reaches
the threshold; *contradicted* when the interval lies below 0 (no threshold); *not shown*
otherwise; learning-rate ladders were judged by a t interval on the log rates. The second rule
is :mod:`layernorm_tutorial.lab.common.verdict` (symmetric words, *too small to matter*,
interval-censored ladders). :func:`rejudge_all` recomputes both from the results files as they
were committed with their data (``claims.JUDGED``), so the list describes the verdicts the
chapters printed, and ``python -m layernorm_tutorial.lab.evidence.rejudge`` stores it in
``book/data/evidence_rejudged.json`` for the evidence chapter.
"""

from __future__ import annotations

import json
import math
import subprocess
import sys
import time

import numpy as np

from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.stored_results import (
    BOOK_DATA,
    output_path_from_args,
    provenance,
    save_results,
)
from layernorm_tutorial.lab.common.verdict import (
    LadderVerdict,
    Verdict,
    holm,
    ladder_verdict,
    paired_verdict,
    rung_bounds,
)

__all__ = ["v1_word", "v1_verdict", "rejudge_evidence", "rejudge_principles", "rejudge_rnn",
           "rejudge_residual", "rejudge_large_models", "rejudge_all", "with_holm", "changed",
           "load_rejudged", "changed_table",
           "COMMITTED_PATH", "COMMAND"]

COMMITTED_PATH = BOOK_DATA / "evidence_rejudged.json"
COMMAND = "python -m layernorm_tutorial.lab.evidence.rejudge"


def v1_word(low: float, high: float, mean: float, threshold: float) -> str:
    """The first rule: holds (low > 0 and mean >= threshold), contradicted (high < 0),
    not shown."""
    if low > 0 and mean >= threshold:
        return "holds"
    if high < 0:
        return "contradicted"
    return "not shown"


def v1_verdict(claimed, baseline, threshold: float, higher_is_better: bool = True) -> Verdict:
    """A paired t verdict with the first rule's word (the interval is the same)."""
    v = paired_verdict(claimed, baseline, threshold=threshold,
                       higher_is_better=higher_is_better)
    return Verdict(**{**v.__dict__, "word": v1_word(v.low, v.high, v.effect, threshold)})


def _item(chapter: str, claim_id: str, setting: str, old: Verdict, new, fmt: dict) -> dict:
    return {"chapter": chapter, "claim_id": claim_id, "setting": setting,
            "old": old.word, "old_text": old.text(**fmt), "new": new.word,
            "new_text": new.text(**fmt), "changed": old.word != new.word,
            "p": new.p, "exploratory": new.exploratory, "_verdict": new}


_PTS = {"digits": 1, "scale": 100, "unit": " pts"}


def _paired(chapter, claim_id, setting, a, b, fmt=_PTS, threshold=None):
    c = claims.claim(claim_id)
    t = c.threshold if threshold is None else threshold
    old = v1_verdict(a, b, t, c.higher_is_better)
    new = paired_verdict(a, b, threshold=t, higher_is_better=c.higher_is_better,
                         claim_id=claim_id, exploratory=c.exploratory)
    return _item(chapter, claim_id, setting, old, new, fmt)


def _ladder(chapter, claim_id, setting, old_a, old_b, bounds_a, bounds_b, base):
    """A ladder row: the first rule's t verdict on log rung values, the second's
    interval-censored verdict on the rung bounds."""
    c = claims.claim(claim_id)
    log = (lambda x: np.log2(x)) if base == 2 else (lambda x: np.log10(x))
    old = v1_verdict(log(np.asarray(old_a)), log(np.asarray(old_b)), c.threshold)
    new: LadderVerdict = ladder_verdict(bounds_a, bounds_b, threshold=c.threshold, base=base,
                                        claim_id=claim_id)
    item = _item(chapter, claim_id, setting, old, new, {"digits": 2})
    item["old_text"] = old.text(2, unit=" log2" if base == 2 else " decades")
    return item


def rejudge_evidence(doc: dict, side: dict) -> list[dict]:
    """Every verdict the evidence chapter printed (table rows, claim 7's third comparison,
    the batch-256 split comparison, the per-digit breakdown; the recalibrated-BN row came from
    live re-runs and is not in a stored file)."""
    from layernorm_tutorial.lab.evidence import analysis, side_experiments

    out = []
    for r in analysis.verdict_rows(doc):
        v = r["verdict"]
        if isinstance(v, LadderVerdict):
            exp = "lr_range_" + r["setting"][:3].lower()
            norm = "ln" if r["claim"].startswith("5. LN") else "bn"
            field = "largest_good" if "largest" in r["setting"] else "failure"
            a, b = (analysis.rate_range(doc, exp, n) for n in (norm, "none"))
            out.append(_ladder("evidence", v.claim_id, f"{r['claim']}: {r['setting']}",
                               getattr(a, field), getattr(b, field),
                               analysis.rate_bounds(a, field), analysis.rate_bounds(b, field),
                               2))
            continue
        d = np.asarray(v.differences)
        kind = "steps" if "steps" in r["setting"] else "pts"
        fmt = {"digits": 0, "unit": " steps"} if kind == "steps" else _PTS
        old = Verdict(**{**v.__dict__, "word": v1_word(v.low, v.high, v.effect, v.threshold)})
        out.append(_item("evidence", v.claim_id, f"{r['claim']}: {r['setting']}", old, v, fmt))
        assert np.allclose(d, v.differences)
    init = side_experiments.init_scale_result(side)
    combo = side_experiments.combination_result(side)
    for r in analysis.side_verdict_rows(init, combo):
        v = r["verdict"]
        old = Verdict(**{**v.__dict__, "word": v1_word(v.low, v.high, v.effect, v.threshold)})
        out.append(_item("evidence", v.claim_id, f"{r['claim']}: {r['setting']}", old, v, _PTS))
    a, b = analysis.paired_values(doc, "mlp_batch_size", "bn", "ln", 256, "val_acc")
    out.append(_paired("evidence", "evidence.x.batch-256-splits",
                       "MLP, batch 256, BN vs LN, validation", a, b))
    for split in ("val", "test"):
        for c, v in enumerate(analysis.per_class_verdicts(doc, "mlp_batch_size", "bn", "ln",
                                                          256, split)):
            old = Verdict(**{**v.__dict__,
                             "word": v1_word(v.low, v.high, v.effect, v.threshold)})
            out.append(_item("evidence", "evidence.x.per-digit",
                             f"MLP, batch 256, BN vs LN, digit {c} ({split})", old, v, _PTS))
    return out


def rejudge_principles(doc: dict) -> list[dict]:
    first, second = doc["arms"]
    return [_paired("principles", "principles.ln-vs-he", f"{first} vs {second}",
                    doc["accuracy"][first], doc["accuracy"][second])]


def rejudge_rnn(doc: dict, key: str = "test_accuracy") -> list[dict]:
    """The 24 verdicts of the RNN race (4 comparisons x 6 epochs) on the stored held-out
    accuracy."""
    pairs = (("LN-LSTM", "LSTM"), ("LN-LSTM", "BN-LSTM"), ("LN-RNN", "RNN"),
             ("LN-RNN", "BN-RNN"))
    runs = sorted((r for r in doc["runs"] if r["role"] == "reported"), key=lambda r: r["seed"])
    out = []
    for epoch in range(1, len(runs[0][key]) + 1):
        table: dict[str, list] = {}
        for r in runs:
            table.setdefault(r["arm"], []).append(r[key][epoch - 1])
        for a, b in pairs:
            out.append(_paired("rnn", "rnn.race", f"{a} beats {b}, epoch {epoch}",
                               table[a], table[b]))
    return out


def rejudge_residual(doc: dict) -> list[dict]:
    def final(arr, layers, schedule):
        runs = sorted((r for r in doc["runs"] if r["arrangement"] == arr
                       and r["layers"] == layers and r["schedule"] == schedule),
                      key=lambda r: r["seed"])
        return np.array([np.mean(r["loss"][-5:]) for r in runs])

    nats = {"digits": 2, "unit": " nats"}
    out = []
    for arr in ("post-LN", "pre-LN"):
        for other in ("no warm-up", "constant, warm-up's mean rate",
                      "constant, warm-up's first rate"):
            out.append(_paired("residual", "residual.warm-up",
                               f"{arr}: warm-up beats {other}", final(arr, 12, "warm-up"),
                               final(arr, 12, other), nats))
    for layers in (6, 12, 24):
        out.append(_paired("residual", "residual.depth",
                           f"pre-LN beats post-LN, {layers} blocks",
                           final("pre-LN", layers, "no warm-up"),
                           final("post-LN", layers, "no warm-up"), nats))
    return out


def rejudge_large_models(doc: dict) -> list[dict]:
    out = []
    main = doc["comparisons"]["main"]["accuracy"]
    for arm in ("rmsnorm", "dyt"):
        out.append(_paired("large_models", "large_models.norms", f"{arm} vs layernorm",
                           main[arm], main["layernorm"]))
    alpha = doc["comparisons"]["alpha"]["accuracy"]
    for a in alpha:
        if a != "0.5":
            out.append(_paired("large_models", "large_models.dyt-alpha",
                               f"alpha_init 0.5 vs {a}", alpha["0.5"], alpha[a]))
    sec = doc["timing"]["seconds"]
    for who in ("torch", "package"):
        ln, rms = np.array(sec[f"{who} layer_norm"]), np.array(sec[f"{who} rms_norm"])
        out.append(_paired("large_models", "large_models.time",
                           f"{who} rms_norm faster than layer_norm (relative time)",
                           rms / ln, np.ones_like(ln), {"digits": 2}))
    qk = doc["qk_norm"]
    lrs = qk["settings"]["lrs"]
    n = len(qk["settings"]["seeds"])

    def stable(arm, i):
        last = None
        for lr in sorted(lrs):
            loss = qk["runs"][arm][str(lr)][i]["final_loss"]
            if loss is None or not (math.isfinite(loss) and loss < math.log(16) - 0.05):
                break
            last = lr
        return last

    last = {arm: [stable(arm, i) for i in range(n)] for arm in ("rmsnorm", "none")}
    floor = lrs[0] / math.sqrt(10)
    point = {arm: [x if x is not None else floor for x in v] for arm, v in last.items()}
    bounds = {arm: [rung_bounds(lrs, x, "last_success") for x in v] for arm, v in last.items()}
    out.append(_ladder("large_models", "large_models.qk-norm",
                       "QK-norm raises the largest stable learning rate", point["rmsnorm"],
                       point["none"], bounds["rmsnorm"], bounds["none"], 10))
    acc = {arm: [r["accuracy"] for r in runs] for arm, runs in doc["deepnorm"]["runs"].items()}
    for setting, a, b in (("DeepNorm vs post-LN, no warm-up", "DeepNorm", "post-LN"),
                          ("DeepNorm vs post-LN, both with warm-up", "DeepNorm + warm-up",
                           "post-LN + warm-up"),
                          ("warm-up helps DeepNorm", "DeepNorm + warm-up", "DeepNorm")):
        out.append(_paired("large_models", "large_models.deepnorm", setting, acc[a], acc[b]))
    return out


def _committed(name: str) -> dict:
    """The results file ``name`` as committed with its data (``claims.JUDGED``); the working
    copy when git is not available."""
    commit = claims.JUDGED[name]["data_commit"][0]
    try:
        text = subprocess.run(["git", "show", f"{commit}:book/data/{name}"],
                              cwd=claims._REPO, capture_output=True, text=True, check=True,
                              timeout=60).stdout
        return json.loads(text)
    except (OSError, subprocess.SubprocessError, ValueError):
        return json.loads((BOOK_DATA / name).read_text())


def with_holm(items: list[dict]) -> list[dict]:
    """``holm`` added to every item: its word survives Holm's correction over its chapter's
    confirmatory verdicts (exploratory items: ``False``)."""
    out = []
    for chapter in dict.fromkeys(i["chapter"] for i in items):
        group = [i for i in items if i["chapter"] == chapter]
        marks = holm([i["_verdict"] for i in group])
        out += [{**i, "holm": m} for i, m in zip(group, marks, strict=True)]
    return [{k: v for k, v in i.items() if k != "_verdict"} for i in out]


def rejudge_all() -> list[dict]:
    """Every stored verdict of the book, old and new word and Holm mark (see the module
    docstring)."""
    return with_holm(rejudge_evidence(_committed("evidence_results.json"),
                                      _committed("evidence_side_results.json"))
                     + rejudge_principles(_committed("principles_ln_vs_he.json"))
                     + rejudge_rnn(_committed("rnn_race.json"))
                     + rejudge_residual(_committed("residual_runs.json"))
                     + rejudge_large_models(_committed("large_models_results.json")))


def changed(items: list[dict]) -> list[dict]:
    """The items whose word changed."""
    return [i for i in items if i["changed"]]


def load_rejudged(path=COMMITTED_PATH) -> list[dict]:
    """The stored list (provenance header checked)."""
    from layernorm_tutorial.lab.common.stored_results import load_results

    return load_results(path)["items"]


def changed_table(items: list[dict], width: int = 80) -> str:
    """The words that changed, one entry per verdict (chapter, setting, old word, new word with
    its interval), wrapped to ``width`` columns, then a count per chapter."""
    import textwrap

    lines = []
    for i in changed(items):
        lines += textwrap.wrap(f"{i['chapter']}: {i['setting']}", width)
        lines += textwrap.wrap(f"{i['old']} -> {i['new_text']}", width,
                               initial_indent="    ", subsequent_indent="      ")
    counts = {}
    for i in items:
        total, moved = counts.get(i["chapter"], (0, 0))
        counts[i["chapter"]] = (total + 1, moved + i["changed"])
    lines.append("words changed / stored verdicts: " + ", ".join(
        f"{c} {m}/{t}" for c, (t, m) in counts.items()))
    return "\n".join(lines)


def main(argv=None) -> int:
    import argparse

    parser = argparse.ArgumentParser(prog=COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", default=None, help="where to write (default: book/data)")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    path = output_path_from_args(parser, args, COMMITTED_PATH)
    start = time.perf_counter()
    items = rejudge_all()
    data = {name: list(rec["data_commit"]) for name, rec in claims.JUDGED.items()}
    doc = {**provenance(COMMAND, {"results_judged": data}, time.perf_counter() - start),
           "items": items}
    save_results(doc, path, overwrite=args.force)
    moved = changed(items)
    print(f"{len(items)} stored verdicts, {len(moved)} words changed; written to {path}")
    for i in moved:
        print(f"  {i['chapter']:<12} {i['setting']}: {i['old']} -> {i['new_text']}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
