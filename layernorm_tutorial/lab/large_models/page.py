"""What the large-models chapter's cells print and judge, in small tested pieces.

Each function takes a section of the stored results
(:func:`~layernorm_tutorial.lab.large_models.results.load_results`) and returns text
within 80 columns, verdicts from the claims registry, or the values the prose glues, so a
cell shows the idea and not the bookkeeping.
"""

from __future__ import annotations

import math
import re
from pathlib import Path

import numpy as np

from layernorm_tutorial.lab.common import claims, verdict
from layernorm_tutorial.lab.common.numerics_paths import relative_spread
from layernorm_tutorial.lab.common.stored_results import BOOK_DATA
from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

__all__ = ["WIDTH", "total_minutes", "wrapped", "provenance_lines", "placement_lines",
           "norm_parameter_table",
           "tuning_table", "norm_verdicts", "timing_lines", "deepnorm_verdicts",
           "live_check", "LIVE_FACTOR", "STORED_ROUNDING", "live_check_lines", "replication",
           "replication_lines", "DEVIATIONS", "CLAIM_SECTIONS", "section_run",
           "registration_note", "settings_glue", "alpha_verdicts", "speed_verdicts",
           "PTS", "chapter_verdicts", "family_marks", "correction_name", "marked_text",
           "verdict_lines", "confirmation_lines", "threshold_sensitivity",
           "accuracy_at_rate", "toy_parameter_counts", "PUBLISHED_SIZES", "size_ratios",
           "CONFIRMATORY_KEYS", "CONFIRMED", "others_for", "with_confirmatory",
           "earlier_lines", "pair_lines"]

WIDTH = 80
#: The live re-run may differ from the stored run by this multiple of the spread measured
#: across the numerics paths (a reader's CPU is one more path) ...
LIVE_FACTOR = 3.0
#: ... plus the rounding of the stored losses (5 significant digits: a relative 1e-4 at
#: most, counted in full).
STORED_ROUNDING = 1e-4

#: Where this chapter departs from the verdict method (large-models review item 11; the
#: DeepNorm threshold: verdict audit 2, finding 1).
DEVIATIONS = (
    "Thresholds: none of this chapter's thresholds demonstrably preceded the first run of "
    "its seeds (the registration lines above). The comparisons with a registered "
    "confirmatory run are judged on its fresh seeds; the timing and the logit-tool ladder "
    "have none, so their verdicts stay exploratory in that sense, whatever their mark.",
    "DeepNorm: the 5-point threshold was committed together with the first run (4ca9504), "
    "whose accuracies the stored re-run repeats to within about 3 points; the confirmatory "
    "run keeps it, and the word of 'DeepNorm + warm-up vs post-LN + warm-up' depends on it "
    "(the sensitivity printed in the DeepNorm section).",
    "DeepNorm: the four arms share one learning rate (0.01), not tuned per arm.",
    "QK-norm and the logit-stability tools: no tuning; the tools use the papers' "
    "constants (caps 50/30, z-loss 1e-4, tau 100), not values tuned for this toy.",
    "The QK-norm ladder's threshold (a quarter of a decade) differs from the evidence "
    "chapter's factor of 2 (0.30 decades); it was re-registered with eight seeds before "
    "the stored run, after the first run of seeds 0-4, and the confirmatory run on eight "
    "fresh seeds keeps it.",
    "Timing: rounds on one CPU, not seeds; the interval is about this machine only.",
    "Held-out data: each seed draws its own held-out batch; no test set is shared.",
    "DyT's alpha_init: every alpha ran at the rate tuned for alpha 0.5, not tuned per "
    "alpha.",
    "Second path: only the QK-norm ladder was re-run on another numerics path; the other "
    "verdicts were judged on one path.",
)

#: The stored section each registered claim of the chapter judges.
CLAIM_SECTIONS = {"large_models.norms": "comparisons", "large_models.dyt-alpha": "comparisons",
                  "large_models.time": "timing", "large_models.deepnorm": "deepnorm",
                  "large_models.qk-norm": "qk_norm", "large_models.logit-tools": "qk_norm"}


def section_run(results: dict, section: str) -> dict:
    """The provenance header (``machine`` with ``date`` and ``commit``) of the run that
    wrote ``section``: the stored file's own, or that of the earlier run it was kept from
    (``previous_runs``)."""
    if section in results.get("seconds", {}):
        return {"machine": results["machine"]}
    for old in results.get("previous_runs", []):
        if section in old["sections"]:
            return {"machine": old["machine"]}
    raise KeyError(f"section must be one of the stored file's sections, got {section!r}")


def registration_note(claim_id: str, results: dict) -> str:
    """:func:`claims.registration_note` against the date and commit of the run that wrote
    the section the claim judges (not the file's latest run)."""
    if claim_id not in CLAIM_SECTIONS:
        raise KeyError(f"claim_id must be one of {sorted(CLAIM_SECTIONS)}, got {claim_id!r}")
    return claims.registration_note(claim_id,
                                    section_run(results, CLAIM_SECTIONS[claim_id]))


def settings_glue(results: dict) -> dict:
    """``{glue name: text}`` for the run settings the prose states (steps, warm-up, depth,
    learning rates, seeds), read from the stored sections' settings."""
    qk, deep = results["qk_norm"]["settings"], results["deepnorm"]["settings"]
    main = results["comparisons"]["main"]
    ptm = results["comparisons"]["per_token_map"]["settings"]
    return {"lm-cmp-steps": f"{main['steps']}",
            "lm-cmp-tuning-seeds": f"{len(main['tuning_seeds'])}",
            "lm-cmp-reported-seeds": f"{len(main['reported_seeds'])}",
            "lm-qk-steps": f"{qk['steps']}", "lm-qk-warmup": f"{qk['warmup_steps']}",
            "lm-deep-layers": f"{deep['num_layers']}", "lm-deep-steps": f"{deep['steps']}",
            "lm-deep-lr": f"{deep['lr']:g}", "lm-deep-warmup": f"{deep['warmup_steps']}",
            "lm-deep-nseeds": f"{len(deep['seeds'])}",
            "lm-s-steps": f"{ptm['steps']}", "lm-s-layers": f"{ptm['num_layers']}"}


def total_minutes(results: dict) -> float:
    """CPU minutes of every job of the stored file: this run's sections and those kept
    from earlier runs (``previous_runs``)."""
    seconds = dict(results["seconds"])
    for old in results.get("previous_runs", []):
        for name in old["sections"]:
            seconds.setdefault(name, old.get("seconds", {}).get(name, 0.0))
    return sum(seconds.values()) / 60


def provenance_lines(results: dict) -> str:
    """Command, machine (CPU, vector capability, threads per job, torch), date, commit and
    minutes per section of a stored results file."""
    m = results["machine"]
    cfg = results["config"]
    minutes = ", ".join(f"{k} {v / 60:.1f}" for k, v in results["seconds"].items())
    lines = [f"stored results: {results['command']}",
             f"machine: {m['cpu']}, {m['cpu_capability']}, "
             f"{cfg.get('threads per job', 1)} thread per job, "
             f"{cfg.get('workers', 1)} workers",
             f"torch {m['torch']}, transformers {cfg.get('transformers')}, "
             f"date {m['date'][:16].replace('T', ' ')}, commit {str(m['commit'])[:12]}",
             f"CPU minutes per section: {minutes}"]
    for old in results.get("previous_runs", []):
        om = old.get("machine", {})
        lines.append(f"  kept from an earlier run ({om.get('date', '?')[:10]}, "
                     f"commit {str(om.get('commit'))[:7]}): {', '.join(old['sections'])}")
    return "\n".join(_wrap(line) for line in lines)


def wrapped(text: str, indent: str = "    ") -> str:
    """``text`` wrapped to :data:`WIDTH` columns, continuation lines indented."""
    return _wrap(text).replace("\n    ", "\n" + indent)


def _wrap(line: str, width: int = WIDTH) -> str:
    import textwrap

    return "\n".join(textwrap.wrap(line, width, subsequent_indent="    ")) or line


def placement_lines(arch: dict) -> str:
    """One line per norm of each traced model (the first block stands for all): module,
    kind, position, which weight gives a unit gain; epsilon once per model (with the
    model's name) when all its norms share it. Parameter counts are left to
    :func:`norm_parameter_table`."""
    lines = []
    for name, model in arch.items():
        rows = [r for r in model["rows"]
                if r["block"] is None or r["block"].endswith(".0")]
        eps = sorted({r["eps"] for r in model["rows"]})
        lines.append(f"{name} (eps {', '.join(f'{e:g}' for e in eps)})")
        for row in rows:
            module = row["module"].removeprefix("model.")
            rest = f"{row['kind']:9s} {row['position']:26s} {row['gain']}"
            if len(module) > 34:       # a long module name gets a line of its own
                lines += [f"  {module}", f"  {'':34s} {rest}"]
            else:
                lines.append(f"  {module:34s} {rest}")
    return "\n".join(lines)


def norm_parameter_table(arch: dict) -> tuple[str, dict]:
    """Norm parameters per block of the tiny traced models (and in units of their width
    ``d``), and of the full-size models built from each configuration's defaults: ``d``,
    layers, norm parameters, their share of all parameters. Returns the text and
    ``{model: share}``."""
    head = (f"{'model':8s} {'tiny: per':>9s} {'per d':>6s} | {'default d':>9s} "
            f"{'layers':>6s} {'per d':>6s} {'norm params':>11s} {'share':>8s}")
    lines, share = [head], {}
    for name, m in arch.items():
        c = m["config"]
        d = c.get("hidden_size", c.get("n_embd", c.get("d_model")))
        per_block = next(iter(m["counts"]["per_block"].values()))
        full = m["default_config"]
        share[name] = full["norm_total"] / full["model_total"]
        full_per_d = _default_per_block(full) / full["hidden_size"]
        lines.append(f"{name:8s} {per_block:9d} {per_block / d:6.2f} | "
                     f"{full['hidden_size']:9d} {full['layers']:6d} {full_per_d:6.2f} "
                     f"{full['norm_total']:11,d} {share[name]:8.4%}")
    return "\n".join(lines), share


def _default_per_block(full: dict) -> float:
    per_block = full.get("per_block")
    if isinstance(per_block, dict) and per_block:
        return float(next(iter(per_block.values())))
    return float(per_block) if per_block else math.nan


def tuning_table(main: dict) -> str:
    """Mean held-out accuracy on the tuning seeds per norm and rate, the chosen rate
    marked ``*``, and whether it sits on an edge of the grid."""
    grid = [float(x) for x in main["lr_grid"]]
    lines = [f"{'lr':>10s}" + "".join(f"{lr:>8g}" for lr in grid) + "  chosen"]
    for norm, by_lr in main["tuning"].items():
        chosen = float(main["lr"][norm])
        cells = []
        for lr in grid:
            acc = np.mean(by_lr[_key(by_lr, lr)])
            mark = "*" if math.isclose(lr, chosen) else " "
            cells.append(f"{acc:7.3f}{mark}")
        edge = " (edge)" if math.isclose(chosen, grid[0]) or math.isclose(chosen, grid[-1]) \
            else ""
        lines.append(f"{norm:>10s}" + "".join(cells) + f"  {chosen:g}{edge}")
    return "\n".join(lines)


def _key(by_lr: dict, lr: float) -> str:
    return next(k for k in by_lr if math.isclose(float(k), lr, rel_tol=1e-9))


def norm_verdicts(main: dict) -> dict:
    """``{"rmsnorm": Verdict, "dyt": Verdict}``: the registered claim
    ``large_models.norms`` against LayerNorm on the reported seeds."""
    acc = {k: np.asarray(v, float) for k, v in main["accuracy"].items()}
    return {arm: claims.judge("large_models.norms", acc[arm], acc["layernorm"],
                              setting=f"{arm} vs layernorm") for arm in ("rmsnorm", "dyt")}


def timing_lines(timing: dict) -> str:
    """Median milliseconds per forward+backward call of each implementation, then the
    mean per-round ratio rms_norm / layer_norm for torch and the package."""
    lines = [f"{'forward+backward, ' + 'x'.join(map(str, timing['shape'])) + ' fp32':36s}"
             f"{'median ms per call':>20s}"]
    lines += [f"  {name:34s}{1e3 * np.median(sec):20.2f}"
              for name, sec in timing["seconds"].items()]
    for who, s in timing["summary"].items():
        r = np.asarray(s["ratio"])
        lines.append(f"{who} rms_norm / layer_norm, per round: "
                     + " ".join(f"{x:.2f}" for x in r))
        lines.append(f"    mean {r.mean():.2f}")
    return "\n".join(lines)


def deepnorm_verdicts(deep: dict) -> dict:
    """The three registered DeepNorm comparisons (``large_models.deepnorm``)."""
    acc = {arm: np.array([r["accuracy"] for r in runs]) for arm, runs in deep["runs"].items()}
    return {key: claims.judge("large_models.deepnorm", acc[a], acc[b], setting=f"{a} vs {b}")
            for key, (a, b) in _DEEPNORM_PAIRS.items()}


#: The three registered DeepNorm comparisons: key -> (claimed arm, baseline arm).
_DEEPNORM_PAIRS = {"no warm-up": ("DeepNorm", "post-LN"),
                   "warm-up": ("DeepNorm + warm-up", "post-LN + warm-up"),
                   "needs warm-up": ("DeepNorm + warm-up", "DeepNorm")}


def live_check(results: dict, live: dict, factor: float = LIVE_FACTOR) -> dict:
    """Compare this machine's re-run (``live``: ``{arm: [loss per step]}``) with the
    stored run's first steps. Per arm: ``gap`` (largest relative difference),
    ``spread`` (measured across the numerics paths, stored), ``tolerance`` =
    ``factor * spread + STORED_ROUNDING`` and ``ok``."""
    paths = results["paths"]
    lr = paths["kwargs"]["lr"]
    seed_index = results["qk_norm"]["settings"]["seeds"].index(paths["kwargs"]["seed"])
    out = {}
    for arm, losses in live.items():
        by_lr = results["qk_norm"]["runs"][arm]
        stored = by_lr[_key(by_lr, lr)][seed_index]["loss"][:len(losses)]
        gap = relative_spread({"stored": stored, "live": list(losses)})
        spread = float(paths["per_arm"][arm])
        tol = factor * spread + STORED_ROUNDING
        out[arm] = {"gap": gap, "spread": spread, "tolerance": tol, "ok": gap <= tol}
    return out


def live_check_lines(check: dict) -> str:
    """One line per arm: this machine's gap, the measured spread, the tolerance."""
    return "\n".join(f"{arm:8s} this machine vs stored {c['gap']:.1e}, spread "
                     f"{c['spread']:.1e}, tolerance {c['tolerance']:.1e}"
                     for arm, c in check.items())


def replication(results: dict) -> dict:
    """The QK-norm ladder verdict on the stored path and on the second path
    (``results["replication"]``). Returns ``original``, ``replicated`` (LadderVerdicts),
    ``same_word``, ``inside`` (whether the replicated median bounds lie inside the
    original 95% interval) and ``same_brackets`` of ``brackets``: how many seed-and-arm
    brackets of the critical rate are the same on both paths."""
    qk = results["qk_norm"]
    original = summarize_sweep(qk).judge("large_models.qk-norm", "rmsnorm")
    rep = results["replication"]
    runs = {arm: {lr: [{"final_loss": x, "accuracy": math.nan, "max_logit": [math.nan]}
                       for x in finals] for lr, finals in by_lr.items()}
            for arm, by_lr in rep["final_loss"].items()}
    settings = {**qk["settings"], "seeds": rep["kwargs"]["seeds"]}
    rep_sweep = summarize_sweep({"settings": settings, "runs": runs})
    replicated = rep_sweep.judge("large_models.qk-norm", "rmsnorm")
    inside = (original.low <= replicated.median_low
              and replicated.median_high <= original.high)
    stored_sweep = summarize_sweep(qk)
    pairs = [(a, b) for arm in ("none", "rmsnorm")
             for a, b in zip(stored_sweep.bounds(arm), rep_sweep.bounds(arm), strict=True)]
    gaps = [abs(b - a) / max(abs(a), 1e-12)
            for arm, by_lr in rep["final_loss"].items() for lr, finals in by_lr.items()
            for a, b in zip((r["final_loss"] for r in qk["runs"][arm][_key(qk["runs"][arm],
                                                                      float(lr))]),
                            finals, strict=True)]
    return {"original": original, "replicated": replicated, "path": rep["path"],
            "same_word": original.word == replicated.word, "inside": inside,
            "same_brackets": sum(a == b for a, b in pairs), "brackets": len(pairs),
            "loss_gap_max": max(gaps), "loss_gap_over_10pct": sum(g > 0.1 for g in gaps),
            "runs": len(gaps)}


def replication_lines(rep: dict) -> str:
    """The two verdicts, the path, and whether the replication agrees."""
    return "\n".join([
        f"stored path:          {rep['original'].text(2)}",
        f"{rep['path'] + ':':21s} {rep['replicated'].text(2)}",
        f"same word: {'yes' if rep['same_word'] else 'no'}; replicated median "
        f"inside the original interval: {'yes' if rep['inside'] else 'no'}",
        f"critical-rate brackets identical on both paths: {rep['same_brackets']} of "
        f"{rep['brackets']} (seed and arm)",
        f"final losses: {rep['loss_gap_over_10pct']} of {rep['runs']} runs differ by more "
        f"than 10%; largest relative difference {rep['loss_gap_max']:.3g}"])


# ------------------------------------------------------------------ the chapter's family
#: How an accuracy verdict prints: one decimal, in points.
PTS = {"digits": 1, "scale": 100, "unit": " pts"}


def alpha_verdicts(alpha: dict) -> dict:
    """``{"0.1": Verdict, "2.0": Verdict}``: the registered claim ``large_models.dyt-alpha``,
    DyT's default ``alpha_init = 0.5`` against each other value (``alpha``: the stored
    ``comparisons.alpha`` section, ``{"accuracy": {alpha: [acc per seed]}}``)."""
    acc = {a: np.asarray(v, float) for a, v in alpha["accuracy"].items()}
    if "0.5" not in acc:
        raise KeyError("alpha['accuracy'] must hold the default alpha_init '0.5'")
    return {a: claims.judge("large_models.dyt-alpha", acc["0.5"], acc[a], setting=f"vs {a}")
            for a in acc if a != "0.5"}


def speed_verdicts(timing: dict) -> dict:
    """``{"torch": Verdict, "package": Verdict}``: the registered claim
    ``large_models.time`` on the per-round ratios rms_norm / layer_norm (the baseline is a
    ratio of 1, lower is better)."""
    out = {}
    for who, s in timing["summary"].items():
        ratio = np.asarray(s["ratio"], float)
        out[who] = claims.judge("large_models.time", ratio, np.ones_like(ratio), setting=who)
    return out


def chapter_verdicts(results: dict) -> list[tuple[str, str, object, dict]]:
    """The chapter's family, in the order of its table: ``(key, label, verdict,
    text_kwargs)`` for every registered verdict of the stored results (13: norms 2,
    DyT's alpha 2, timing 2, QK-norm 1, the logit tools 3, DeepNorm 3). The same list feeds
    the chapter's table and the interview's reprint, so the marks agree."""
    main, qk = results["comparisons"]["main"], results["qk_norm"]
    norm_v = norm_verdicts(main)
    alpha_v = alpha_verdicts(results["comparisons"]["alpha"])
    speed = speed_verdicts(results["timing"])
    sweep = summarize_sweep(qk)
    ratio = {"digits": 2}
    rows = [("rmsnorm", "RMSNorm vs LayerNorm", norm_v["rmsnorm"], PTS),
            ("dyt", "DyT vs LayerNorm", norm_v["dyt"], PTS),
            *[(f"alpha-{a}", f"DyT alpha 0.5 vs {float(a):g}", v, PTS)
              for a, v in alpha_v.items()],
            *[(f"time-{who}", f"time: {who} rms vs ln", v, ratio) for who, v in speed.items()],
            ("qk-norm", "QK-norm vs none", sweep.judge("large_models.qk-norm", "rmsnorm"),
             ratio),
            *[(arm, f"{arm} vs none", sweep.judge("large_models.logit-tools", arm), ratio)
              for arm in ("softcap", "zloss", "qkclip")],
            *[(f"deepnorm-{k.replace(' ', '-')}", f"DeepNorm: {k}", v, PTS)
              for k, v in deepnorm_verdicts(results["deepnorm"]).items()]]
    return rows


def family_marks(rows) -> dict:
    """``{key: True if the word survives the family correction}`` over all of ``rows``
    (:func:`chapter_verdicts`), by the verdict method's own marks
    (:func:`~layernorm_tutorial.lab.common.verdict.holm`)."""
    marks = verdict.holm([v for _, _, v, _ in rows])
    return {key: bool(m) for (key, _, _, _), m in zip(rows, marks, strict=True)}


def correction_name() -> str:
    """The name of the family correction behind the method's marks, as the method's own
    sentence gives it (``Bonferroni`` in method version 3, ``Holm`` before)."""
    match = re.search(r"survives an? ([A-Z][\w-]*) correction", verdict.family_sentence([]))
    if match is None:  # pragma: no cover - the sentence of lab.common.verdict changed
        raise RuntimeError("verdict.family_sentence no longer names its correction")
    return match.group(1)


def marked_text(rows, key: str) -> str:
    """The verdict ``key`` of ``rows`` as the table prints it: its text, with the family
    mark (:data:`~layernorm_tutorial.lab.common.verdict.MARK`) first when it survives."""
    for k, _, v, kw in rows:
        if k == key:
            mark = f"{verdict.MARK} " if family_marks(rows)[key] else ""
            return mark + v.text(**kw)
    raise KeyError(f"key must be one of {[k for k, _, _, _ in rows]}, got {key!r}")


def verdict_lines(rows, keys=None, width: int = WIDTH) -> str:
    """Some verdicts of the family (``keys``; all by default) with the marks of the *whole*
    family: a subset printed alone keeps the marks of the chapter's correction over all
    ``len(rows)`` verdicts, not of a smaller family. Ends with the method's sentence."""
    marks = family_marks(rows)
    chosen = [r for r in rows if keys is None or r[0] in keys]
    if keys is not None and len(chosen) != len(set(keys)):
        known = [k for k, _, _, _ in rows]
        raise KeyError(f"keys must be among {known}, got {list(keys)}")
    label_w = max(len(label) for _, label, _, _ in chosen)
    lines = []
    for key, label, v, kw in chosen:
        text = f"{verdict.MARK if marks[key] else ' '} {v.text(**kw)}"
        line = f"{label:<{label_w}} {text}"
        lines += [line] if len(line) <= width else [label, f"    {text}"]
    lines.append(_wrap(verdict.family_sentence([v for _, _, v, _ in rows]), width))
    return "\n".join(lines)


def confirmation_lines(results: dict, data_dir: Path = BOOK_DATA) -> str:
    """One line per claim of the chapter: its registered confirmatory run on fresh seeds
    (:data:`~layernorm_tutorial.lab.common.claims.CONFIRMATIONS`, with the commit that
    registered it) and whether its results file exists in ``data_dir``; or why it has none
    (:data:`~layernorm_tutorial.lab.common.claims.UNCONFIRMED`)."""
    lines = []
    for cid in CLAIM_SECTIONS:
        try:
            c = claims.confirmation(cid)
        except KeyError:
            why = claims.UNCONFIRMED.get(cid, "none registered")
            lines.append(_wrap(f"{cid}: no confirmatory run: {why}"))
            continue
        commit, date = claims.confirmation_registered(cid)
        seeds = f"{c.seeds[0]}-{c.seeds[-1]}"
        state = ("stored" if (Path(data_dir) / c.results).is_file()
                 else "not run yet")
        lines.append(_wrap(f"{cid}: confirmatory run registered {date[:10]} ({commit}) on "
                           f"fresh seeds {seeds}, {c.results}: {state}"))
    return "\n".join(lines)


def threshold_sensitivity(deep: dict, key: str, thresholds) -> dict:
    """The DeepNorm comparison ``key`` (of :func:`deepnorm_verdicts`) judged again at other
    thresholds (fractions of accuracy): ``{threshold: Verdict}``. A threshold other than
    the registered one makes the verdict exploratory (:func:`claims.judge`)."""
    acc = {arm: np.array([r["accuracy"] for r in runs]) for arm, runs in deep["runs"].items()}
    pairs = _DEEPNORM_PAIRS
    if key not in pairs:
        raise KeyError(f"key must be one of {list(pairs)}, got {key!r}")
    a, b = pairs[key]
    return {float(t): claims.judge("large_models.deepnorm", acc[a], acc[b],
                                   setting=f"{a} vs {b}", threshold=float(t))
            for t in thresholds}


def accuracy_at_rate(qk: dict, arm: str, lr: float, baseline: str = "none"):
    """Held-out accuracy of ``arm`` against ``baseline`` at one learning rate of the stored
    ladder, paired by seed, judged with the verdict method at the chapter's registered
    accuracy threshold (``large_models.norms``). No claim registers accuracy at one rate of
    the ladder, so the verdict is **exploratory** (chosen after the data; outside the
    family)."""
    sweep = summarize_sweep(qk)
    rate = next((r for r in sweep.lrs if math.isclose(r, lr, rel_tol=1e-9)), None)
    if rate is None:
        raise KeyError(f"lr must be one of the ladder's rates {sweep.lrs}, got {lr!r}")
    label = f"{arm} vs {baseline}, accuracy at lr {lr:g}"
    return verdict.paired_verdict(np.asarray(sweep.accuracy[arm][rate]),
                                  np.asarray(sweep.accuracy[baseline][rate]),
                                  threshold=claims.threshold("large_models.norms"),
                                  claim=label, exploratory=True)


#: Published sizes (parameters) of the models whose constants the chapter's tools use:
#: Gemma 2 "from 2 billion to 27 billion parameters" (Gemma Team 2024, abstract); Kimi K2
#: "1 trillion total parameters" (Kimi Team 2025, abstract).
PUBLISHED_SIZES = {"Gemma 2": (2e9, 27e9), "Kimi K2": (1e12, 1e12)}


def toy_parameter_counts() -> dict:
    """Parameters of the chapter's toy models: the norm comparison's pre-norm Transformer
    (LayerNorm), the QK-norm ladder's model (no tool) and the 12-block DeepNorm stack."""
    from layernorm_tutorial.lab.large_models import comparisons, deepnorm, qk_norm
    from layernorm_tutorial.lab.large_models.results import DEEPNORM_SETTINGS

    def count(model) -> int:
        return sum(p.numel() for p in model.parameters())

    return {"norm comparison": count(comparisons.make_model("layernorm")),
            "QK-norm ladder": count(qk_norm.QKTransformer()),
            "DeepNorm stack": count(deepnorm.make_post_ln(DEEPNORM_SETTINGS["num_layers"],
                                                          deepnorm=True))}


def size_ratios(toy: int) -> dict:
    """``{model: (low, high)}``: how many times ``toy`` parameters each published model of
    :data:`PUBLISHED_SIZES` is."""
    if not toy > 0:
        raise ValueError(f"toy must be a positive parameter count, got {toy!r}")
    return {name: (lo / toy, hi / toy) for name, (lo, hi) in PUBLISHED_SIZES.items()}


# ------------------------------------------------------------------ confirmatory runs
#: The labels of :func:`layernorm_tutorial.lab.confirmatory.verdicts.large_models_pairs` and
#: ``qk_norm_pairs`` -> the keys of :func:`chapter_verdicts` (the verdicts with a registered
#: confirmatory run).
CONFIRMATORY_KEYS = {"rmsnorm vs layernorm": "rmsnorm", "dyt vs layernorm": "dyt",
                     "DyT alpha_init 0.5 vs 0.1": "alpha-0.1",
                     "DyT alpha_init 0.5 vs 2.0": "alpha-2.0",
                     "DeepNorm: no warm-up": "deepnorm-no-warm-up",
                     "DeepNorm: warm-up": "deepnorm-warm-up",
                     "DeepNorm: needs warm-up": "deepnorm-needs-warm-up",
                     "QK-norm (rmsnorm) vs none: largest stable rate": "qk-norm"}


#: What :func:`with_confirmatory` appends to the label of a confirmatory verdict.
CONFIRMED = "*"


def others_for(rows, pairs) -> list:
    """The verdicts of ``rows`` that ``pairs`` do not judge: the ``others`` that count in
    the family's marks next to those pairs (pass the chapter's final family, with every
    confirmatory verdict in place, so that the marks are over all its verdicts)."""
    keys = {CONFIRMATORY_KEYS.get(p.label) for p in pairs}
    return [v for key, _, v, _ in rows if key not in keys]


def with_confirmatory(rows, pairs) -> tuple[list, dict]:
    """The chapter's family with each verdict that has a confirmatory run replaced by it.

    ``pairs``: :func:`layernorm_tutorial.lab.confirmatory.verdicts.large_models_pairs` and
    ``qk_norm_pairs`` (each with ``label``, ``confirmatory`` and ``exploratory``, the earlier
    run's verdict marked exploratory). Returns ``(rows, earlier)``: the rows of
    :func:`chapter_verdicts` with the confirmatory verdicts in place and :data:`CONFIRMED`
    after their label, and
    ``{key: the earlier, exploratory verdict}``. ``ValueError`` if a pair's earlier verdict is
    not the one the chapter judged from its stored results (the two would describe different
    runs), or a pair's label is unknown."""
    by_key = {}
    for p in pairs:
        if p.label not in CONFIRMATORY_KEYS:
            raise ValueError(f"pairs: unknown label {p.label!r}; expected one of "
                             f"{sorted(CONFIRMATORY_KEYS)}")
        by_key[CONFIRMATORY_KEYS[p.label]] = p
    out, earlier = [], {}
    for key, label, v, kw in rows:
        p = by_key.get(key)
        if p is None:
            out.append((key, label, v, kw))
            continue
        e = p.exploratory
        if (e.word, e.effect, e.low, e.high) != (v.word, v.effect, v.low, v.high):
            raise ValueError(f"pairs: the earlier verdict of {p.label!r} ({e.text()}) is not "
                             f"the chapter's ({v.text()})")
        out.append((key, label + CONFIRMED, p.confirmatory, kw))
        earlier[key] = e
    return out, earlier


def earlier_lines(rows, earlier: dict, width: int = WIDTH) -> str:
    """The earlier run's verdicts of the confirmed comparisons, each marked exploratory
    (outside the family, no mark), in the order of ``rows``."""
    lines = ["earlier run of the same comparisons (exploratory, outside the family):"]
    for key, label, _, kw in rows:
        if key in earlier:
            name, text = label.removesuffix(CONFIRMED), earlier[key].text(**kw)
            line = f"  {name:24s} {text}"
            lines += [line] if len(line) <= width else [f"  {name}", f"      {text}"]
    return "\n".join(lines)


def pair_lines(rows, earlier: dict, keys, width: int = WIDTH) -> str:
    """For each of ``keys``: its label, the verdict of ``rows`` with the family's mark
    (``confirmatory:`` when ``earlier`` holds the earlier run's verdict of that key, which
    follows as ``earlier run:``, exploratory)."""
    labels = {key: label.removesuffix(CONFIRMED) for key, label, _, _ in rows}
    kw = {key: k for key, _, _, k in rows}
    lines = []
    for key in keys:
        if key not in labels:
            raise KeyError(f"keys must be among {list(labels)}, got {key!r}")
        head = "  confirmatory: " if key in earlier else "  "
        lines += [labels[key], _wrap(head + marked_text(rows, key), width)]
        if key in earlier:
            lines.append(_wrap("  earlier run:  " + earlier[key].text(**kw[key]), width))
    return "\n".join(lines)
