"""The confirmatory verdicts, with the earlier (exploratory) verdict of the same comparison
beside each.

A chapter's verdict is the one judged on the confirmatory run (fresh seeds, registered
before the runs: :data:`~layernorm_tutorial.lab.common.claims.CONFIRMATIONS`); the earlier
run's verdict is printed beside it, marked *exploratory*: its threshold did not precede its
data. Each ``*_pairs`` function judges both results files with the chapter's own judging
function (so the two are judged alike), pairs the verdicts in the chapter's order and marks
the confirmatory ones that survive the correction over the chapter's family
(:func:`~layernorm_tutorial.lab.common.verdict.holm`; ``others``: the chapter's other
confirmatory verdicts, e.g. the ladders registered before their data).

Every function reads the book's files by default; pass documents to judge others.
"""

from __future__ import annotations

import dataclasses
import textwrap
from collections.abc import Callable, Sequence
from dataclasses import dataclass

from layernorm_tutorial._cli import StoredFileError, StoredFileMissing, read_json_document
from layernorm_tutorial.lab.common import claims
from layernorm_tutorial.lab.common.stored_results import (
    BOOK_COMMANDS,
    BOOK_DATA,
    MAIN_SECTIONS,
    is_smoke_run,
)
from layernorm_tutorial.lab.common.verdict import HOLM_MARK, holm

__all__ = ["Pair", "load", "evidence_pairs", "principles_pairs", "rnn_pairs",
           "residual_pairs", "large_models_pairs", "qk_norm_pairs", "pairs_text",
           "large_models_unconfirmed", "large_models_chapter_pairs", "CHAPTERS"]


@dataclass(frozen=True)
class Pair:
    """One comparison: ``confirmatory`` (judged on the fresh seeds; ``mark``: survives the
    chapter's correction) and ``exploratory`` (the earlier run, marked exploratory), each
    also as printed text (``*_text``, the chapter's units); ``registration``: the
    confirmatory run's registration line (:func:`claims.registration_note`)."""

    label: str
    claim_id: str
    confirmatory: object
    exploratory: object
    mark: bool
    confirmatory_text: str
    exploratory_text: str
    registration: str

    def text(self, width: int = 80) -> str:
        """``label``, then the confirmatory verdict and the exploratory one beside it."""
        mark = f"{HOLM_MARK} " if self.mark else ""
        lines = [self.label,
                 f"  confirmatory: {mark}{self.confirmatory_text}",
                 f"  earlier run:  {self.exploratory_text}"]
        return "\n".join(textwrap.fill(line, width, subsequent_indent=" " * 16)
                         for line in lines)


def load(name: str) -> dict:
    """``book/data/<name>``, its shape checked: a missing file is a ``FileNotFoundError``
    naming the command that writes it; a broken or incomplete one, or a smoke run
    (``--tiny``), a ``ValueError`` (:class:`~layernorm_tutorial._cli.StoredFileError`), one
    line naming the file and what to do."""
    path = BOOK_DATA / name
    command = BOOK_COMMANDS.get(name)
    if not path.is_file() and not path.is_dir():
        plans = {p.results for p in claims.CONFIRMATIONS}
        hint = (f"python -m layernorm_tutorial.lab.confirmatory (the plan writing {name})"
                if name in plans else command or "the chapter's command")
        raise StoredFileMissing(f"no results file {path}: run {hint}")
    doc = read_json_document(path, required=MAIN_SECTIONS.get(name, {}), command=command)
    if is_smoke_run(doc):
        raise StoredFileError(f"{path}: holds a smoke run (--tiny), not the book's results; "
                              f"restore it (git checkout) or re-run {command or 'its command'}")
    return doc


def _exploratory(v):
    return dataclasses.replace(v, exploratory=True)


def _pairs(conf: list[tuple[str, object]], earlier: list[tuple[str, object]],
           fmt: Callable[[object], str], conf_doc: dict, others: Sequence = ()) -> list[Pair]:
    """Pair two judged lists (same labels, same order) and mark the confirmatory family."""
    if [label for label, _ in conf] != [label for label, _ in earlier]:
        raise ValueError("the confirmatory and the earlier run judge different comparisons: "
                         f"{[lab for lab, _ in conf]} vs {[lab for lab, _ in earlier]}")
    verdicts = [v for _, v in conf]
    if any(v.exploratory for v in verdicts):
        raise ValueError("a confirmatory verdict is exploratory: its claim has no "
                         "registered confirmation")
    marks = holm([*verdicts, *others])[:len(verdicts)]
    out = []
    for (label, v), (_, e), mark in zip(conf, earlier, marks, strict=True):
        claims.confirmation(v.claim_id)   # KeyError for a claim with no confirmatory plan
        e = _exploratory(e)
        out.append(Pair(label, v.claim_id, v, e, bool(mark), fmt(v), fmt(e),
                        claims.registration_note(v.claim_id, conf_doc)))
    return out


def _pts(v) -> str:
    return v.text(1, 100, " pts")


# ---- the chapters ---------------------------------------------------------------------------

_KIND = {"evidence.4.bn-regularizes": "gap", "evidence.5.ln-speed": "steps",
         "evidence.5.rates": "log2"}


def evidence_pairs(conf: dict | None = None, earlier: dict | None = None,
                   side_conf: dict | None = None, side_earlier: dict | None = None
                   ) -> list[Pair]:
    """The evidence chapter's 32 verdicts (:func:`~..evidence.analysis.verdict_rows` and
    :func:`~..evidence.analysis.side_verdict_rows`), labelled ``"<claim>: <setting>"``."""
    from layernorm_tutorial.lab.evidence import analysis
    from layernorm_tutorial.lab.evidence import side_experiments as se

    conf = load(claims.confirmation("evidence.2.rnn").results) if conf is None else conf
    earlier = load("evidence_results.json") if earlier is None else earlier
    side_conf = (load(claims.confirmation("evidence.6.bn-init").results)
                 if side_conf is None else side_conf)
    side_earlier = load("evidence_side_results.json") if side_earlier is None else side_earlier

    def rows(doc, side):
        rs = analysis.verdict_rows(doc) + analysis.side_verdict_rows(
            se.init_scale_result(side), se.combination_result(side))
        return [(f"{r['claim']}: {r['setting']}", r["verdict"]) for r in rs]

    def fmt(v):
        return analysis.verdict_cell(v, _KIND.get(v.claim_id, "accuracy"))

    pairs = _pairs(rows(conf, side_conf), rows(earlier, side_earlier), fmt, conf)
    side_note = claims.registration_note("evidence.6.bn-init", side_conf)
    return [dataclasses.replace(p, registration=side_note)
            if p.claim_id in ("evidence.6.bn-init", "evidence.7.combining") else p
            for p in pairs]


def principles_pairs(conf: dict | None = None, earlier: dict | None = None) -> list[Pair]:
    """The principles chapter's one verdict (LN vs He init)."""
    from layernorm_tutorial.lab.principles import ln_vs_he

    conf = load(claims.confirmation(ln_vs_he.CLAIM_ID).results) if conf is None else conf
    earlier = load(claims.claim(ln_vs_he.CLAIM_ID).results) if earlier is None else earlier
    label = "default init + LayerNorm vs He init"
    return _pairs([(label, ln_vs_he.verdict_from_document(conf))],
                  [(label, ln_vs_he.verdict_from_document(earlier))], _pts, conf)


def rnn_pairs(conf: dict | None = None, earlier: dict | None = None) -> list[Pair]:
    """The rnn chapter's family: every comparison after every epoch
    (:func:`~..rnn.race.family`), labelled ``"<a> vs <b>, epoch <e>"``."""
    from layernorm_tutorial.lab.rnn import race

    conf = load(claims.confirmation(race.CLAIM).results) if conf is None else conf
    earlier = load(claims.claim(race.CLAIM).results) if earlier is None else earlier

    def judged(doc):
        return [(f"{a} vs {b}, epoch {epoch}", v)
                for ((a, b), epoch), (v, _) in race.family(doc).items()]

    return _pairs(judged(conf), judged(earlier), _pts, conf)


def residual_pairs(conf: dict | None = None, earlier: dict | None = None) -> list[Pair]:
    """The residual chapter's nine verdicts (:func:`~..residual.sweep.all_verdicts`)."""
    from layernorm_tutorial.lab.residual import sweep

    conf = load(claims.confirmation("residual.depth").results) if conf is None else conf
    earlier = load(claims.claim("residual.depth").results) if earlier is None else earlier
    return _pairs(list(sweep.all_verdicts(conf).items()),
                  list(sweep.all_verdicts(earlier).items()),
                  lambda v: v.text(2, 1, " nats"), conf)


def large_models_pairs(conf: dict | None = None, earlier: dict | None = None,
                       others: Sequence = ()) -> list[Pair]:
    """The large_models verdicts with a confirmatory run: RMSNorm and DyT vs LayerNorm
    (:func:`~..large_models.page.norm_verdicts`), DyT's default alpha vs 0.1 and 2.0, and
    the three DeepNorm comparisons (:func:`~..large_models.page.deepnorm_verdicts`).
    ``others``: the chapter's other verdicts of its family (time, QK-norm and logit-tool
    ladders), which count in the marks."""
    import numpy as np

    from layernorm_tutorial.lab.large_models import page

    conf = load(claims.confirmation("large_models.norms").results) if conf is None else conf
    earlier = load(claims.claim("large_models.norms").results) if earlier is None else earlier

    def judged(doc):
        out = [(f"{arm} vs layernorm", v)
               for arm, v in page.norm_verdicts(doc["comparisons"]["main"]).items()]
        acc = {a: np.asarray(v, float) for a, v in doc["comparisons"]["alpha"]["accuracy"].items()}
        out += [(f"DyT alpha_init 0.5 vs {a}",
                 claims.judge("large_models.dyt-alpha", acc["0.5"], acc[a], setting=f"vs {a}"))
                for a in acc if a != "0.5"]
        out += [(f"DeepNorm: {key}", v)
                for key, v in page.deepnorm_verdicts(doc["deepnorm"]).items()]
        return out

    return _pairs(judged(conf), judged(earlier), _pts, conf, others)


def qk_norm_pairs(conf: dict | None = None, earlier: dict | None = None,
                  others: Sequence = ()) -> list[Pair]:
    """The QK-norm ladder verdict (``large_models.qk-norm``: rmsnorm vs none, eight seeds)
    on its confirmatory ladder, with the stored ladder's verdict beside it."""
    from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

    cid = "large_models.qk-norm"
    conf = load(claims.confirmation(cid).results) if conf is None else conf
    earlier = load(claims.claim(cid).results) if earlier is None else earlier

    def judged(doc):
        return [("QK-norm (rmsnorm) vs none: largest stable rate",
                 summarize_sweep(doc["qk_norm"]).judge(cid, "rmsnorm"))]

    return _pairs(judged(conf), judged(earlier), lambda v: v.text(), conf, others)


def large_models_unconfirmed(results: dict | None = None) -> list[tuple[str, object]]:
    """The large_models family's verdicts without a confirmatory run, judged on the stored
    results: the timing claim (``large_models.time``, torch and package) and the logit-tool
    ladder (registered before its first run): ``[(label, verdict)]``."""
    from layernorm_tutorial.lab.large_models import page
    from layernorm_tutorial.lab.large_models.sweep import summarize_sweep

    results = load(claims.claim("large_models.time").results) if results is None else results
    out = [(f"time: {who} rms vs ln", v)
           for who, v in page.speed_verdicts(results["timing"]).items()]
    sweep = summarize_sweep(results["qk_norm"])
    out += [(f"{arm} vs none", sweep.judge("large_models.logit-tools", arm))
            for arm in ("softcap", "zloss", "qkclip")]
    return out


def large_models_chapter_pairs(results: dict | None = None, conf: dict | None = None,
                               qk_conf: dict | None = None) -> list[Pair]:
    """The large_models verdicts with a confirmatory run (:func:`large_models_pairs`, then
    :func:`qk_norm_pairs`), marked over the chapter's whole family of 13: these 8
    confirmatory verdicts and the 5 of :func:`large_models_unconfirmed`."""
    results = load(claims.claim("large_models.time").results) if results is None else results
    conf = load(claims.confirmation("large_models.norms").results) if conf is None else conf
    qk_conf = (load(claims.confirmation("large_models.qk-norm").results)
               if qk_conf is None else qk_conf)
    rest = [v for _, v in large_models_unconfirmed(results)]
    qk_verdict = qk_norm_pairs(qk_conf, results)[0].confirmatory
    main = large_models_pairs(conf, results, others=[qk_verdict, *rest])
    qk = qk_norm_pairs(qk_conf, results, others=[*(p.confirmatory for p in main), *rest])
    return [*main, *qk]


#: chapter -> the function that returns its pairs.
CHAPTERS: dict[str, Callable[..., list[Pair]]] = {
    "evidence": evidence_pairs, "principles": principles_pairs, "rnn": rnn_pairs,
    "residual": residual_pairs, "large_models": large_models_pairs,
    "large_models_qk": qk_norm_pairs}


def pairs_text(pairs: Sequence[Pair], width: int = 80) -> str:
    """The pairs as a chapter prints them: the registration line once per distinct line,
    then each comparison with its confirmatory verdict and the earlier one beside it."""
    notes = list(dict.fromkeys(p.registration for p in pairs))
    head = [textwrap.fill(n, width, subsequent_indent="  ") for n in notes]
    return "\n".join([*head, *(p.text(width) for p in pairs)])
