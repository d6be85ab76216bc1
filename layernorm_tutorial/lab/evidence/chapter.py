"""The evidence chapter's bookkeeping: the tables it prints and the values it glues.

Each function takes the stored results (``doc``: ``book/data/evidence_results.json``; ``side``:
``book/data/evidence_side_results.json``) and returns text to print or ``{name: value}`` to glue,
so that the notebook's cells show the idea and stay within 80 columns. Nothing here trains.
"""

from __future__ import annotations

import dataclasses
import math
import textwrap

import numpy as np
from scipy import stats

from layernorm_tutorial import nn as lnn
from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.verdict import decide, family_sentence
from layernorm_tutorial.lab.evidence import analysis
from layernorm_tutorial.lab.evidence.results import find_runs

__all__ = ["sweep_summary", "sweep_glue", "confirmatory_summary", "test_set_se",
           "ChapterVerdicts", "acc_text",
           "batch_size_table", "bn_mode_losses", "accuracy_table", "gap_table", "speed_table",
           "rate_table", "registry_table", "threshold_change", "threshold_change_all",
           "exploratory_speed", "digit_breakdown", "recalibration", "live_check_line"]


def sweep_summary(doc: dict) -> str:
    """What the stored sweep contains: runs, time, seeds, split sizes, optimizer, settings."""
    config = doc["config"]
    n_runs = len(doc["runs"]) + len(doc["range_runs"])
    lines = [f"{n_runs} run records ({doc['runs_trained']} distinct trainings; runs shared by "
             f"two experiments are stored twice), {doc['sweep_seconds'] / 60:.0f} minutes with "
             f"{config['workers']} single-threaded workers",
             f"tuning seeds {doc['tuning_seeds']}, reported seeds {doc['seeds']}; "
             f"split sizes {config['data']['sizes']}",
             f"optimizer: {config['optimizer']}",
             f"one test image is {100 / config['data']['sizes']['test']:.2f} percentage points"]
    for exp in config["experiments"]:
        lines.append(f"  {exp['name']:<15} {exp['model']}  norms {exp['norms']}  "
                     f"batch sizes {exp['batch_sizes']}  {exp['epochs']} epochs")
    for rr in config["rate_ranges"]:
        lines.append(f"  {rr['name']:<15} {rr['model']}  norms {rr['norms']}  "
                     f"batch {rr['batch_size']}  {rr['epochs']} epochs")
    return "\n".join(lines)


def confirmatory_summary(conf: dict, side_conf: dict, width: int = 80) -> str:
    """What the confirmatory runs contain: runs, minutes, fresh seeds, the rates kept (main
    sweep) and the fixed rates (side experiments), and the machine."""
    from layernorm_tutorial.lab.common.training import provenance_line

    n_runs = len(conf["runs"]) + len(conf["range_runs"])
    lines = textwrap.wrap(
        f"confirmatory runs: {n_runs} run records on fresh seeds {_seeds(conf['seeds'])} "
        f"at the learning rates the earlier run chose (the rate ladders extended by their "
        f"own rule; {conf['seconds'] / 60:.0f} minutes), "
        f"and the side experiments on seeds {_seeds(side_conf['config']['seeds'])} at their "
        f"fixed rates ({side_conf['seconds'] / 60:.0f} minutes), made by", width)
    return "\n".join(lines + [provenance_line(conf), provenance_line(side_conf)])


def sweep_glue(doc: dict) -> dict:
    """The sweep's wall time (minutes), its workers, and their product: an upper bound on
    the single-core CPU time (every worker busy the whole time)."""
    minutes = doc["sweep_seconds"] / 60
    workers = doc["config"]["workers"]
    return {"sweep_minutes": f"{minutes:.0f}", "sweep_workers": workers,
            "sweep_cpu_minutes": f"{minutes * workers:.0f}"}


def test_set_se(doc: dict, accuracy: float = 0.95) -> float:
    """The binomial standard error of an ``accuracy`` measured on the fixed test set,
    :math:`\\sqrt{p(1-p)/n_{test}}` (a fraction)."""
    n = doc["config"]["data"]["sizes"]["test"]
    return math.sqrt(accuracy * (1 - accuracy) / n)


class ChapterVerdicts:
    """Every verdict of the chapter, computed once, with the family marks (Bonferroni,
    verdict method v3) over the whole family (main sweep and side experiments): ``rows``
    (see :func:`~.analysis.verdict_rows`; ``result`` carries the mark).

    ``confirmatory``: ``(doc, init, combo)`` of the confirmatory runs on fresh seeds
    (``book/data/evidence_confirmatory.json`` and ``evidence_side_confirmatory.json``,
    registered before their runs). With them, ``rows`` are the confirmatory verdicts (the
    chapter's family) and ``earlier_rows`` the same comparisons judged on ``doc``, ``init``
    and ``combo``, marked exploratory and outside the family (no mark); without them,
    ``rows`` are the verdicts of ``doc`` and ``earlier_rows`` is empty."""

    def __init__(self, doc: dict, init, combo, confirmatory: tuple | None = None):
        earlier = analysis.verdict_rows(doc) + analysis.side_verdict_rows(init, combo)
        self.confirmatory = confirmatory
        if confirmatory is None:
            self.rows = analysis.holm_rows(earlier)
            self.earlier_rows: list[dict] = []
            return
        conf_doc, conf_init, conf_combo = confirmatory
        if not conf_doc.get("confirmatory"):
            raise ValueError("confirmatory: the first document must be a confirmatory results "
                             "file (python -m layernorm_tutorial.lab.confirmatory evidence)")
        rows = analysis.verdict_rows(conf_doc) + analysis.side_verdict_rows(conf_init,
                                                                            conf_combo)
        labels = [(r["claim"], r["setting"]) for r in rows]
        if labels != [(r["claim"], r["setting"]) for r in earlier]:
            raise ValueError("the confirmatory and the earlier run judge different "
                             "comparisons")
        self.rows = analysis.holm_rows(rows)
        self.earlier_rows = [_exploratory_row(r) for r in earlier]

    @property
    def conf_doc(self) -> dict | None:
        """The confirmatory run's main results (``None`` without one)."""
        return None if self.confirmatory is None else self.confirmatory[0]

    def row(self, claim_start: str, setting: str) -> dict:
        """The row whose claim starts with ``claim_start`` and whose setting starts with
        ``setting`` (``KeyError`` when none does)."""
        return _find(self.rows, claim_start, setting)

    def earlier_row(self, claim_start: str, setting: str) -> dict:
        """The same comparison judged on the earlier run (exploratory); without a
        confirmatory run, :meth:`row`."""
        return _find(self.earlier_rows or self.rows, claim_start, setting)

    def said(self, claim_start: str, setting: str) -> str:
        """The word with its interval (and family mark) for the prose."""
        return self.row(claim_start, setting)["result"]

    def said_earlier(self, claim_start: str, setting: str) -> str:
        """The earlier run's word with its interval, marked exploratory."""
        return self.earlier_row(claim_start, setting)["result"]

    def pair_lines(self, claim_start: str, setting: str = "", width: int = 80) -> str:
        """Each matching comparison: its label, the confirmatory verdict (with its mark) and
        the earlier run's beside it (exploratory), within ``width`` columns. Without a
        confirmatory run: the label and the verdict."""
        lines = []
        for i, r in enumerate(self.rows):
            if not (r["claim"].startswith(claim_start) and r["setting"].startswith(setting)):
                continue
            lines += textwrap.wrap(f"{r['claim']}, {r['setting']}", width,
                                   subsequent_indent="    ")
            if not self.earlier_rows:
                lines += _indented(r["result"], "  ", width)
                continue
            lines += _indented(r["result"], "  confirmatory: ", width)
            lines += _indented(self.earlier_rows[i]["result"], "  earlier run:  ", width)
        if not lines:
            raise KeyError(f"no verdict row {claim_start!r} / {setting!r}")
        return "\n".join(lines)

    def verdict_list(self, width: int = 80) -> str:
        """Every verdict of the family as plain text within ``width`` columns, grouped by
        claim (with its threshold): each setting, its
        verdict (with its mark) and, with a confirmatory run, the earlier run's beside it
        (:meth:`pair_lines`); then the family sentence."""
        lines, seen = [], set()
        for r in self.rows:
            if r["claim"] not in seen:
                seen.add(r["claim"])
                lines += textwrap.wrap(f"{r['claim']} (threshold {r['threshold']})", width,
                                       subsequent_indent="    ")
            i = self.rows.index(r)
            lines += textwrap.wrap(r["setting"], width, initial_indent="  ",
                                   subsequent_indent="      ")
            if not self.earlier_rows:
                lines += _indented(r["result"], "    ", width)
                continue
            lines += _indented(r["result"], "    confirmatory: ", width)
            lines += _indented(self.earlier_rows[i]["result"], "    earlier run:  ", width)
        lines += textwrap.wrap(self.holm_sentence(), width)
        return "\n".join(lines)

    def markdown(self) -> str:
        if not self.earlier_rows:
            return analysis.verdict_markdown(self.rows)
        return analysis.verdict_markdown(self.rows, self.earlier_rows)

    def holm_sentence(self) -> str:
        return family_sentence([r["verdict"] for r in self.rows])

    def survivors(self) -> int:
        return sum(r["holm"] for r in self.rows)

    def n_ladder(self) -> int:
        """How many of the family's verdicts are ladder verdicts (undecidable at n = 5)."""
        return sum(hasattr(r["verdict"], "bounds") for r in self.rows)

    def holm_note(self, width: int = 80) -> str:
        """The family sentence (Bonferroni), wrapped, to print under a table with marks."""
        return textwrap.fill(self.holm_sentence(), width)

    def changed(self) -> list[tuple[str, str, str]]:
        """``(claim and setting, earlier word, confirmatory word)`` for every comparison
        whose word differs between the earlier run and the confirmatory run."""
        return [(f"{c['claim']}, {c['setting']}", e["word"], c["word"])
                for c, e in zip(self.rows, self.earlier_rows, strict=True)
                if c["word"] != e["word"]]


def _find(rows: list[dict], claim_start: str, setting: str) -> dict:
    for r in rows:
        if r["claim"].startswith(claim_start) and r["setting"].startswith(setting):
            return r
    raise KeyError(f"no verdict row {claim_start!r} / {setting!r}")


def _indented(text: str, head: str, width: int) -> list[str]:
    return textwrap.wrap(text, width, initial_indent=head,
                         subsequent_indent=" " * len(head))


def _exploratory_row(r: dict) -> dict:
    """A verdict row of the earlier run, its verdict marked exploratory (its threshold did
    not precede its first data), without a family mark."""
    v = dataclasses.replace(r["verdict"], exploratory=True)
    return {**r, "verdict": v, "holm": False, "result": "exploratory, " + r["result"]}


def acc_text(doc: dict, experiment: str, norm: str, batch_size: int,
             metric: str = "test_acc") -> str:
    """``97.3 ± 0.2 %``: mean ± sd over the reported seeds."""
    s = analysis.summarize(analysis.values(find_runs(doc, experiment, norm, batch_size),
                                           metric))
    return f"{100 * s.mean:.1f} ± {100 * s.sd:.1f} %"


def batch_size_table(doc: dict, verdicts: ChapterVerdicts) -> tuple[str, dict]:
    """Claim 1's table (steps, BN and LN accuracy, verdict per batch size) and its glue.

    With a confirmatory run (``verdicts.confirmatory``) the table gives both runs' accuracies
    and then each batch size's confirmatory verdict with the earlier one beside it
    (:meth:`ChapterVerdicts.pair_lines`); the glue adds ``conf_mlp_<norm>_<batch>`` and
    ``claim1_<batch>_earlier``."""
    sizes = sorted({r["spec"]["batch_size"] for r in find_runs(doc, "mlp_batch_size", "bn")})
    conf = verdicts.conf_doc
    glue = {}
    if conf is None:
        lines = [f"test accuracy of the MLP, mean ± sd over {len(doc['seeds'])} seeds, and "
                 "the verdict of claim 1 (LN minus BN up to batch 8, BN minus LN above)",
                 "batch  steps" + "".join(f"{n:>16}" for n in ("bn", "ln")) + "   verdict"]
    else:
        lines = textwrap.wrap(
            f"test accuracy of the MLP, mean ± sd over {len(doc['seeds'])} seeds: the earlier "
            f"run (seeds {_seeds(doc['seeds'])}, the figure) and the confirmatory run (fresh "
            f"seeds {_seeds(conf['seeds'])})", 80)
        lines.append("batch  steps" + "".join(f"{n:>15}" for n in (
            "bn, earlier", "ln, earlier", "bn, confirm.", "ln, confirm.")))
    for b in sizes:
        steps = find_runs(doc, "mlp_batch_size", "ln", b)[0]["steps"]
        said = verdicts.said("1.", f"MLP, batch {b}")
        accs = [acc_text(doc, "mlp_batch_size", n, b) for n in ("bn", "ln")]
        glue.update({f"mlp_bn_{b}": accs[0], f"mlp_ln_{b}": accs[1], f"claim1_{b}": said})
        if conf is None:
            lines.append(f"{b:>5} {steps:>6}" + "".join(f"{a:>16}" for a in accs)
                         + f"   {said}")
            continue
        fresh = [acc_text(conf, "mlp_batch_size", n, b) for n in ("bn", "ln")]
        lines.append(f"{b:>5} {steps:>6}" + "".join(f"{a:>15}" for a in accs + fresh))
        glue.update({f"conf_mlp_bn_{b}": fresh[0], f"conf_mlp_ln_{b}": fresh[1],
                     f"claim1_{b}_earlier": verdicts.said_earlier("1.", f"MLP, batch {b}")})
    if conf is not None:
        lines.append("claim 1: LN minus BN up to batch 8, BN minus LN above")
        lines.append(verdicts.pair_lines("1."))
    glue["mlp_none_32"] = acc_text(doc, "mlp_batch_size", "none", 32)
    glue["steps_256"] = find_runs(doc, "mlp_batch_size", "ln", 256)[0]["steps"]
    steps_2 = find_runs(doc, "mlp_batch_size", "ln", 2)[0]["steps"]
    glue["steps_ratio_2_256"] = f"{steps_2 / glue['steps_256']:.0f}"
    return "\n".join(lines), glue


def _seeds(seeds) -> str:
    """``1–5`` for consecutive seeds, else the list."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def bn_mode_losses(doc: dict) -> tuple[str, dict]:
    """BN's and LN's training-mode and evaluation-mode loss on the training set, per batch
    size (LN is the control: its two modes compute the same thing), and the weight that BN's
    running averages still give their initial values after the batch-256 run's steps,
    :math:`(1 - \\text{momentum})^{\\text{steps}}`."""
    sizes = sorted({r["spec"]["batch_size"] for r in find_runs(doc, "mlp_batch_size", "bn")})
    lines = [f"MLP, cross-entropy on the training set (mean over {len(doc['seeds'])} seeds); "
             "train: training mode, last epoch; eval: evaluation mode",
             "batch  BN train  BN eval  LN train  LN eval"]
    glue = {}
    for b in sizes:
        cells = []
        for norm in ("bn", "ln"):
            runs = find_runs(doc, "mlp_batch_size", norm, b)
            mb = analysis.values(runs, "minibatch_loss_last_epoch").mean()
            ev = analysis.values(runs, "train_loss").mean()
            cells += [f"{mb:>8.3f}", f"{ev:>8.3f}"]
            glue[f"{norm}{b}_train_mode"] = f"{mb:.2f}"
            glue[f"{norm}{b}_eval_mode"] = f"{ev:.2f}"
        lines.append(f"{b:>5}  " + " ".join(cells))
    momentum = lnn.BatchNorm1d(1).momentum
    steps = find_runs(doc, "mlp_batch_size", "bn", max(sizes))[0]["steps"]
    glue["bn_momentum"] = f"{momentum:g}"
    glue["ema_initial_weight"] = f"{(1 - momentum) ** steps:.2f}"
    return "\n".join(lines), glue


def accuracy_table(doc: dict, conf: dict | None = None) -> tuple[str, dict]:
    """Claims 2 and 3: test and final training accuracy per norm of the RNN and the CNN;
    with ``conf`` (the confirmatory run) its two columns beside the earlier run's, glued as
    ``conf_<exp>_<norm>`` and ``conf_<exp>_<norm>_train``."""
    lines, glue = [], {}
    for exp, norms in (("rnn", ("none", "bn", "ln")),
                       ("cnn", ("none", "bn", "ln", "gn", "ln_c"))):
        lines.append(f"{exp.upper()}, batch 32: test accuracy / final training accuracy, "
                     "mean ± sd")
        if conf is not None:
            lines.append(f"  {'earlier run':<37}| confirmatory run")
        for n in norms:
            test, train = acc_text(doc, exp, n, 32), acc_text(doc, exp, n, 32, "train_acc")
            line = f"  {n:<5} {test:>14}   {train:>14}"
            glue[f"{exp}_{n}"] = test
            glue[f"{exp}_{n}_train"] = train
            if conf is not None:
                ctest = acc_text(conf, exp, n, 32)
                ctrain = acc_text(conf, exp, n, 32, "train_acc")
                line += f"  | {ctest:>14}   {ctrain:>14}"
                glue[f"conf_{exp}_{n}"] = ctest
                glue[f"conf_{exp}_{n}_train"] = ctrain
            lines.append(line)
    return "\n".join(lines), glue


def gap_table(doc: dict, conf: dict | None = None) -> tuple[str, dict]:
    """Claim 4: train-minus-test accuracy gap per norm (percentage points), with the final
    training accuracy that the gap depends on; with ``conf`` (the confirmatory run) its two
    columns beside the earlier run's, glued as ``conf_gap_<exp>_<norm>`` and
    ``conf_train_<exp>_<norm>``."""
    lines, glue = [], {}
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN")):
        norms = [n for n in ("none", "bn", "ln", "gn", "ln_c") if find_runs(doc, exp, n, 32)]
        head = f"{name}, batch 32: train-test accuracy gap (pts) | training accuracy, mean ± sd"
        lines.append(head if conf is None else
                     f"{head}\n  {'earlier run':<39}| confirmatory run")
        for n in norms:
            gap, train = _gap(doc, exp, n), acc_text(doc, exp, n, 32, "train_acc")
            line = f"  {n:<5} {gap}   | {train:>14}"
            glue[f"gap_{exp}_{n}"] = f"{gap} pts"
            glue[f"train_{exp}_{n}"] = train
            if conf is not None:
                cgap, ctrain = _gap(conf, exp, n), acc_text(conf, exp, n, 32, "train_acc")
                line += f"   | {cgap}   | {ctrain:>14}"
                glue[f"conf_gap_{exp}_{n}"] = f"{cgap} pts"
                glue[f"conf_train_{exp}_{n}"] = ctrain
            lines.append(line)
    return "\n".join(lines), glue


def _gap(doc: dict, exp: str, norm: str) -> str:
    s = analysis.summarize(100 * analysis.values(find_runs(doc, exp, norm, 32), "gap"))
    return f"{s.mean:5.2f} ± {s.sd:4.2f}"


def _steps_cells(doc: dict, exp: str, norms) -> dict[str, str]:
    """Mean steps to 90 % validation accuracy per norm (``never`` counts)."""
    out = {}
    for n in norms:
        steps = np.array([analysis.steps_to_accuracy(r) for r in find_runs(doc, exp, n, 32)])
        reached = np.isfinite(steps)
        out[n] = (f"{steps[reached].mean():.0f}" if reached.all() else
                  f"{steps[reached].mean():.0f} ({(~reached).sum()} never)"
                  if reached.any() else "never")
    return out


def speed_table(doc: dict, verdicts: ChapterVerdicts) -> tuple[str, dict]:
    """Claim 5 (speed): mean steps to 90 % validation accuracy per norm, and the verdict;
    with a confirmatory run, its steps (glued ``conf_speed_<exp>_<norm>``) and each
    verdict with the earlier one beside it."""
    lines, glue = [], {}
    conf = verdicts.conf_doc
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN"), ("rnn", "RNN")):
        norms = [n for n in ("none", "bn", "ln", "gn", "ln_c") if find_runs(doc, exp, n, 32)]
        total = find_runs(doc, exp, "none", 32)[0]["steps"]
        cells = _steps_cells(doc, exp, norms)
        glue.update({f"speed_{exp}_{n}": text for n, text in cells.items()})
        said = verdicts.said("5. LN speeds", name)
        glue[f"claim5_speed_{name}"] = said
        head = (f"{name}: budget {total} steps; steps to 90 % val. acc.: "
                + ", ".join(f"{n} {t}" for n, t in cells.items()))
        if conf is None:
            lines += [head, f"     LN faster than none: {said}"]
            continue
        lines += textwrap.wrap(head, 80, subsequent_indent="    ")
        fresh = _steps_cells(conf, exp, norms)
        glue.update({f"conf_speed_{exp}_{n}": text for n, text in fresh.items()})
        glue[f"claim5_speed_{name}_earlier"] = verdicts.said_earlier("5. LN speeds", name)
        lines += textwrap.wrap("  confirmatory run (fresh seeds): "
                               + ", ".join(f"{n} {t}" for n, t in fresh.items()), 80,
                               subsequent_indent="    ")
    if conf is not None:
        lines.append(verdicts.pair_lines("5. LN speeds"))
    return "\n".join(lines), glue


def exploratory_speed(doc: dict) -> tuple[str, dict]:
    """BN against LN on steps to 90 % (MLP, CNN): judged after the fact (claim
    ``evidence.x.bn-vs-ln-speed``), so exploratory."""
    lines, glue = [], {}
    for exp, name in (("mlp_batch_size", "MLP"), ("cnn", "CNN")):
        budget = find_runs(doc, exp, "ln", 32)[0]["steps"]
        a, b = analysis.paired_values(doc, exp, "bn", "ln", 32, "steps_to_90")
        v = claims.judge("evidence.x.bn-vs-ln-speed", a, b,
                         threshold=analysis.SPEED_THRESHOLD * budget)
        text = analysis.verdict_cell(v, "steps")
        lines.append(f"BN faster than LN, {name} (threshold {v.threshold:.1f} steps): {text}")
        glue[f"bn_vs_ln_speed_{name}"] = text
    return "\n".join(lines), glue


def _rate_ranges(doc: dict, prefix: str = "") -> tuple[list[str], dict, list]:
    """Per norm and seed: best, largest good and failure rates; glue ``<prefix>range_*``;
    the seeds whose good rates skip a rung."""
    lines, glue, gaps = [], {}, []
    for exp in sorted({r["experiment"] for r in doc["range_runs"]}):
        name = exp.removeprefix("lr_range_")
        for norm in ("none", "bn", "ln"):
            r = analysis.rate_range(doc, exp, norm)
            lines += [f"{name} {norm:<4}  best         {_rates(r.best_rate)}",
                      f"{'':10}largest good {_rates(r.largest_good)}",
                      f"{'':10}failure      {_rates(r.failure)}"]
            for key, x in (("good", r.largest_good), ("fail", r.failure)):
                glue[f"{prefix}range_{name}_{norm}_{key}"] = "–".join(
                    f"{v:g}" for v in sorted({x.min(), x.max()}))
            gaps.extend((name, norm, seed, rates)
                        for seed, rates in analysis.gapped_good_rates(r))
    return lines, glue, gaps


def _seed_counts(v) -> tuple[int, int]:
    """Seeds whose ratio's bounds lie surely above 1 and surely below 1."""
    return sum(lo >= 0 for lo, _ in v.bounds), sum(hi <= 0 for _, hi in v.bounds)


def _ladder_glue(row: dict, key: str) -> dict:
    v = row["verdict"]
    above, below = _seed_counts(v)
    return {key: row["result"],
            f"{key}_seeds": (f"{above} of {v.n} seeds above 1" if above else
                             f"{below} of {v.n} seeds below 1"),
            f"{key}_split": (f"{above} of {v.n} seeds above 1, {below} below, "
                             f"{v.n - above - below} undetermined")}


def _gapped_text(gaps) -> str:
    return "; ".join(f"{name.upper()} {norm.upper()} seed {seed} "
                     f"({' '.join(f'{x:g}' for x in rates)})"
                     for name, norm, seed, rates in gaps) or "none"


def rate_table(doc: dict, verdicts: ChapterVerdicts) -> tuple[str, dict]:
    """Claim 5 (rates): per norm and seed the best, largest good and failure rates; then the
    ladder verdicts with the number of seeds whose bounds lie beyond a ratio of 1.

    With a confirmatory run, both runs' rates (the confirmatory run's glued with the prefix
    ``conf_``) and each ladder verdict with the earlier one beside it (glued with the suffix
    ``_earlier``: ``claim5_rate_<key>_earlier``, ``..._earlier_seeds``, ...)."""
    conf = verdicts.conf_doc
    lines, glue, gaps = _rate_ranges(doc)
    if conf is not None:
        lines.insert(0, f"earlier run (seeds {_seeds(doc['seeds'])}):")
        more, conf_glue, conf_gaps = _rate_ranges(conf, "conf_")
        lines += [f"confirmatory run (fresh seeds {_seeds(conf['seeds'])}):", *more]
        glue |= conf_glue
    for i, row in enumerate(verdicts.rows):
        if "allows larger" not in row["claim"]:
            continue
        who = "ln" if row["claim"].startswith("5. LN") else "bn"
        kind = "good" if "largest" in row["setting"] else "fail"
        key = f"claim5_rate_{row['setting'][:3]}_{who}_{kind}"
        glue |= _ladder_glue(row, key)
        runs = [("", row)]
        if conf is not None:
            earlier = verdicts.earlier_rows[i]
            glue |= {k.replace(key, f"{key}_earlier", 1): v
                     for k, v in _ladder_glue(earlier, key).items()}
            runs = [("  confirmatory: ", row), ("  earlier run:  ", earlier)]
        lines.append(f"{row['setting'][:3]} {who.upper()} {kind}")
        for head, r in runs:
            above, below = _seed_counts(r["verdict"])
            lines += _indented(r["result"], head or "  ", 80)
            lines.append(f"{' ' * max(len(head), 2)}seeds whose ratio is surely above 1: "
                         f"{above}, below 1: {below}")
    glue["claim5_gapped"] = _gapped_text(gaps)
    glue["claim5_gapped_n"] = len(gaps)
    lines.append("good rates that skip a rung: " + glue["claim5_gapped"])
    if conf is not None:
        glue["conf_claim5_gapped"] = _gapped_text(conf_gaps)
        lines[-1] = "good rates that skip a rung, earlier run: " + glue["claim5_gapped"]
        lines += textwrap.wrap("confirmatory run: " + glue["conf_claim5_gapped"], 80)
    return "\n".join(lines), glue


def _rates(x) -> str:
    return "[" + " ".join("inf" if math.isinf(v) else f"{v:g}" for v in x) + "]"


def registry_table(doc: dict, side: dict, chapter: str = "evidence") -> str:
    """The chapter's registered claims (id, threshold and unit, or exploratory), then each
    distinct registration note
    (:func:`~layernorm_tutorial.lab.common.claims.registration_note`) with its claims."""
    docs = {"evidence_results.json": doc, "evidence_side_results.json": side}
    lines, notes = [], {}
    for c in claims.family(chapter):
        tag = "exploratory" if c.exploratory else f"threshold {c.threshold:g} {c.unit}"
        lines.append(f"  {c.id:<32} {tag}")
        notes.setdefault(claims.registration_note(c.id, docs[c.results]), []).append(c.id)
    for note, ids in notes.items():
        lines.append(f"{len(ids)} claims: {note}")
    return "\n".join(lines)


def threshold_change(doc: dict) -> dict:
    """Claim 4 (MLP, BN vs LN gap) judged at the evidence chapter's old threshold (0.005)
    and at the registered one: ``{threshold: verdict text}``."""
    out = {}
    for t in (0.005, claims.threshold("evidence.4.bn-regularizes")):
        v = analysis.judge(doc, "mlp_batch_size", "bn", "ln", 32, metric="gap",
                           threshold=t, higher_is_better=False)
        out[t] = analysis.verdict_cell(v, "gap")
    return out


def threshold_change_all(verdicts, old: float = 0.005) -> list[str]:
    """Every paired verdict judged at the registered one-point threshold, re-decided at
    ``old`` (the accuracy threshold the chapter used while three-seed results were visible):
    one line per word that changes. ``verdicts``: a :class:`ChapterVerdicts` (its ``rows``)
    or a list of verdict rows (e.g. its ``earlier_rows``, the run that threshold history is
    about)."""
    out = []
    rows = verdicts.rows if isinstance(verdicts, ChapterVerdicts) else verdicts
    for r in rows:
        v = r["verdict"]
        if not hasattr(v, "differences") or not math.isclose(v.threshold, 0.01):
            continue
        word = decide(v.low, v.high, old)
        if word != v.word:
            interval = analysis.verdict_cell(v).removeprefix("exploratory, ")
            out.append(f"{r['claim']}, {r['setting']}: {v.word} -> {word} "
                       f"({interval.split(': ', 1)[1]})")
    return out


def digit_breakdown(doc: dict, split: str, n_classes: int = 10) -> tuple[str, dict]:
    """Batch 256, BN minus LN accuracy per digit on ``split`` (exploratory, claim
    ``evidence.x.per-digit``). The digit with the largest BN lead is chosen after looking,
    so its interval is widened for the choice among ``n_classes`` digits (Bonferroni:
    :math:`\\bar d \\pm t_{1-0.025/k,\\,n-1} s_d/\\sqrt n`) and carries no verdict word."""
    per_class = analysis.per_class_verdicts(doc, "mlp_batch_size", "bn", "ln", 256,
                                            split=split)
    effects = [v.effect for v in per_class]
    best = int(np.argmax(effects))
    v = per_class[best]
    d = np.asarray(v.differences)
    half = (stats.t.ppf(1 - 0.025 / n_classes, v.n - 1) * d.std(ddof=1)
            / math.sqrt(v.n))
    others = max(abs(e) for c, e in enumerate(effects) if c != best)
    accs = {}
    for norm in ("bn", "ln"):
        runs = find_runs(doc, "mlp_batch_size", norm, 256)
        accs[norm] = np.mean([r["final"][f"{split}_acc_per_class"][best] for r in runs])
    best_text = (f"{100 * v.effect:+.1f} pts [{100 * (v.effect - half):+.1f}, "
                 f"{100 * (v.effect + half):+.1f}] (99.5 %, for the choice among "
                 f"{n_classes} digits), n = {v.n}")
    lines = [f"  {split:<4} " + " ".join(f"{c}: {100 * e:+5.1f}"
                                         for c, e in enumerate(effects)),
             f"  {split}: largest BN lead, digit {best} (exploratory): {best_text}",
             f"  {split}: digit {best} accuracy BN {100 * accs['bn']:.1f} %, "
             f"LN {100 * accs['ln']:.1f} %; other digits |BN - LN| <= "
             f"{100 * others:.1f} pts"]
    glue = {f"b256_{split}_best_digit": best, f"b256_{split}_best": best_text,
            f"b256_{split}_others_max": f"{100 * others:.1f}",
            f"b256_{split}_best_bn": f"{100 * accs['bn']:.1f} %",
            f"b256_{split}_best_ln": f"{100 * accs['ln']:.1f} %"}
    return "\n".join(lines), glue


def recalibration(doc: dict, live: dict) -> tuple[str, dict]:
    """The stored recalibration result (batch 256, native path of the live-check file) as an
    exploratory verdict against LN; returns the text and its glue."""
    recal = np.array(live["checks"]["reruns"]["paths"]["native"]["recalibrated"])
    bn = analysis.values(find_runs(doc, "mlp_batch_size", "bn", 256), "test_acc")
    ln = analysis.values(find_runs(doc, "mlp_batch_size", "ln", 256), "test_acc")
    v = claims.judge("evidence.x.recalibrated-bn", recal, ln)
    text = analysis.verdict_cell(v)
    lines = [f"BN, batch 256, running statistics from training: {100 * bn.mean():.1f} % "
             "test accuracy",
             f"BN, batch 256, statistics recalibrated (stored):  {100 * recal.mean():.1f} %",
             f"LN, batch 256:                                    {100 * ln.mean():.1f} %",
             f"recalibrated BN better than LN: {text}"]
    return "\n".join(lines), {"recal_bn256": f"{100 * recal.mean():.1f} %",
                              "recal_effect": text}


def live_check_line(name: str, stored: float, live: float, measured: float,
                    tolerance: float) -> str:
    """One CPU-invariant line: the stored value and the tolerance; the live value is only
    compared (``AssertionError`` naming the check when it lies outside)."""
    if not abs(live - stored) <= tolerance + 1e-12:
        raise AssertionError(f"{name}: live re-run {live:.4f} differs from the stored "
                             f"{stored:.4f} by more than {tolerance:.4f}")
    return (f"{name}: stored {stored:.4f}; the live re-run agrees within {tolerance:.4f} "
            f"(measured spread over the numerics paths {measured:.4f})")


def gradient_table(layer_mean, norms, scales) -> str:
    """Claim 6: |dL/dW| of layer 1 and layer 8 at initialization per norm and scale
    (``layer_mean``: shape ``(norms, scales, layers)``)."""
    lines = ["|dL/dW| at initialization (geometric mean over 3 seeds)",
             "norm  scale   layer 1   layer 8   layer 1 / layer 8"]
    for i, norm in enumerate(norms):
        for j, scale in enumerate(scales):
            g = layer_mean[i, j]
            lines.append(f"{norm:<5} {scale:>4g} {g[0]:>9.3g} {g[-1]:>9.3g} "
                         f"{g[0] / g[-1]:>12.2f}")
    return "\n".join(lines)


def init_accuracy_table(init, prefix: str = "") -> tuple[str, dict]:
    """Claim 6: test accuracy after 150 SGD steps per norm and initialization scale (glue
    names ``<prefix>init_acc_<norm>_<scale>``)."""
    lines = [f"test accuracy (%) after 150 SGD steps, mean ± sd over seeds {init.seeds}",
             "norm " + "".join(f"{f'scale {s:g}':>15}" for s in init.scales)]
    glue = {}
    for i, norm in enumerate(init.norms):
        cells = zip(init.mean()[i], init.sd()[i], strict=True)
        lines.append(f"{norm:<5}" + "".join(f"{100 * m:>9.1f} ± {100 * s:<4.1f}"
                                            for m, s in cells))
        for j, scale in enumerate(init.scales):
            key = f"{prefix}init_acc_{norm}_{scale:g}".replace(".", "_")
            glue[key] = f"{100 * init.mean()[i, j]:.1f} ± {100 * init.sd()[i, j]:.1f} %"
    return "\n".join(lines), glue


def _combo_lines(combo, prefix: str = "") -> tuple[list[str], dict]:
    lines = [f"test accuracy (%), mean ± sd over seeds {_seeds(combo.seeds)} | training "
             "accuracy (%)"]
    glue = {}
    for v, test, train in zip(combo.variants, 100 * combo.test_acc, 100 * combo.train_acc,
                              strict=True):
        seeds = " ".join(f"{x:.1f}" for x in test)
        lines.append(f"  {v:<20} {test.mean():5.1f} ± {test.std(ddof=1):.1f}   "
                     f"seeds {seeds}   | {train.mean():5.1f}")
        glue[f"{prefix}combo_{v.replace(' ', '_').replace('+', 'and')}"] = \
            f"{test.mean():.1f} ± {test.std(ddof=1):.1f} %"
    return lines, glue


def combination_table(combo, verdicts: ChapterVerdicts) -> tuple[str, dict]:
    """Claim 7: test (and training) accuracy per variant, and the combination's verdicts.

    With a confirmatory run, its accuracies too (glued ``conf_combo_*``) and each verdict
    with the earlier one beside it (``combo_vs_<other>_earlier``)."""
    lines, glue = _combo_lines(combo)
    conf = verdicts.confirmatory
    if conf is not None:
        more, conf_glue = _combo_lines(conf[2], "conf_")
        lines = ["earlier run:", *lines, "confirmatory run (fresh seeds):", *more]
        glue |= conf_glue
    for other in ("BN everywhere", "LN everywhere", "no norm"):
        setting = f"conv + attention, vs {other}"
        text = verdicts.said("7.", setting)
        glue[f"combo_vs_{other.split()[0]}"] = text
        if conf is None:
            lines.append(f"combination better than {other}: {text}")
            continue
        glue[f"combo_vs_{other.split()[0]}_earlier"] = verdicts.said_earlier("7.", setting)
    if conf is not None:
        lines.append(verdicts.pair_lines("7."))
    return "\n".join(lines), glue
