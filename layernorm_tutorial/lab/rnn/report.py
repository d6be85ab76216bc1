"""The RNN chapter's bookkeeping: tables within 80 columns and the values its prose quotes.

The notebook's cells show what is measured and judged; the printing lives here, tested.
A setting of :func:`~.experiments.unrolled_dynamics` is *chaotic* when its printed values
differ between numerics paths (measured by :func:`dynamics_summary` on every path, stored in
``book/data/rnn_paths.json``): float64 round-off of about 1e-16 grows there by the per-step
factor of the gradient, compounded over 150 steps, into the printed digits. Those rows are
printed apart, as this machine's run.
"""

from __future__ import annotations

import textwrap

import numpy as np

from layernorm_tutorial.lab.common import verdict as verdict_method
from layernorm_tutorial.lab.rnn import race

__all__ = ["DYNAMICS_SETTINGS", "accuracy_table", "chaotic_settings", "dynamics_rows",
           "dynamics_summary", "gradient_rows", "line_label", "per_step_factor",
           "rate_grids", "registration_lines", "replication_changes",
           "replication_lines", "setting_key", "verdict_table", "pairs_table",
           "best_decided", "epoch_words"]

SCALES = (0.5, 3.0)
#: ``(mode, nonlinearity, layer_norm, scale)`` of every run the chapter prints.
DYNAMICS_SETTINGS = tuple(
    [("impulse", f, ln, s) for f in ("identity", "tanh") for ln in (False, True)
     for s in SCALES]
    + [("noise", "tanh", ln, s) for ln in (False, True) for s in SCALES])
SATURATION_STEPS = (1, 10, 50, 100, 150)


def setting_key(mode: str, f: str, ln: bool, s: float) -> str:
    """``"impulse tanh LN 3"``: a JSON-able name for one setting."""
    return f"{mode} {f} {'LN' if ln else 'plain'} {s:g}"


def line_label(ln: bool, s: float) -> str:
    """``"LN, scale 3"``: the label of a line in the chapter's figures and tables."""
    return f"{'LN' if ln else 'plain'}, scale {s:g}"


def per_step_factor(grad_norm) -> float:
    """``(|dL/dh_1| / |dL/dh_T|)^(1/(T-1))``: the gradient's mean growth per step."""
    g = np.asarray(grad_norm)
    return float((g[0] / g[-1]) ** (1 / (len(g) - 1)))


def _printed(run: dict) -> dict:
    """The values the chapter prints of one run."""
    return {"rms_first": float(run["state_rms"][0]), "rms_last": float(run["state_rms"][-1]),
            "grad_last": float(run["grad_norm"][-1]),
            "grad_first": float(run["grad_norm"][0]),
            "factor": per_step_factor(run["grad_norm"]),
            "saturation": [float(run["saturation"][t - 1]) for t in SATURATION_STEPS],
            "saturation_max": float(run["saturation"].max())}


def dynamics_summary(steps: int = 150) -> dict:
    """Every printed value of every setting (the target of ``run_on_paths``)."""
    from layernorm_tutorial.lab.rnn.experiments import unrolled_dynamics

    return {setting_key(*k): _printed(unrolled_dynamics(
        layer_norm=k[2], recurrent_scale=k[3], steps=steps, nonlinearity=k[1],
        inputs=k[0])) for k in DYNAMICS_SETTINGS}


def chaotic_settings(paths_doc: dict, tol: float = 1e-6) -> set[str]:
    """The settings whose printed values differ between the measured numerics paths by more
    than ``tol`` (relative): ``paths_doc["dynamics"]["spread"]``."""
    return {k for k, spread in paths_doc["dynamics"]["spread"].items() if spread > tol}


def dynamics_rows(runs: dict, skip=frozenset()) -> str:
    """RMS of ``h_t`` at steps 1 and T for the impulse runs ``{(f, ln, s): run}``, except
    the settings in ``skip`` (printed apart)."""
    lines = ["f        setting          RMS(h_t) at t=1     t=150"]
    for (f, ln, s), r in runs.items():
        if setting_key("impulse", f, ln, s) in skip:
            lines.append(f"{f:8s} {line_label(ln, s):16s} chaotic: see below")
            continue
        p = _printed(r)
        lines.append(f"{f:8s} {line_label(ln, s):16s} {p['rms_first']:8.3g}  "
                     f"{p['rms_last']:12.3g}")
    return "\n".join(lines)


def gradient_rows(runs: dict, skip=frozenset()) -> str:
    """Gradient norms at the loss and 149 steps back, the per-step factor and the saturated
    fractions for the tanh runs ``{(mode, ln, s): run}``, except the settings in ``skip``."""
    grad = ["|dL/dh_t| at the loss (t = T = 150) and 149 steps back (t = 1);",
            "per-step factor = (|dL/dh_1| / |dL/dh_T|)^(1/149)",
            "input    setting          |dL/dh_T|  |dL/dh_1|  factor"]
    steps = ", ".join(str(t) for t in SATURATION_STEPS)
    sat = ["", f"saturated tanh units (|h| > 0.99) at steps {steps}; largest:"]
    for (mode, ln, s), r in runs.items():
        head = f"{mode:8s} {line_label(ln, s):16s}"
        if setting_key(mode, "tanh", ln, s) in skip:
            grad.append(f"{head} chaotic: see below")
            sat.append(f"{head} chaotic: see below")
            continue
        p = _printed(r)
        grad.append(f"{head} {p['grad_last']:9.2f}  {p['grad_first']:9.1e}  "
                    f"{p['factor']:6.3f}")
        sat.append(f"{head} " + " ".join(f"{v:.3f}" for v in p["saturation"])
                   + f"  {p['saturation_max']:.3f}")
    return "\n".join(grad + sat)


def accuracy_table(doc: dict, epochs=(1, race.EPOCHS)) -> tuple[str, dict]:
    """Mean (smallest - largest) test accuracy over the reported seeds per arm after each of
    ``epochs``; returns ``(table, glue values)`` (``rnn-acc-<arm>-<epoch>``)."""
    tables = {e: race.accuracy_table(doc, e) for e in epochs}
    lines = ["test accuracy, mean over the reported seeds (smallest-largest)"]
    values = {}
    for arm, key in race.ARMS.items():
        cells = []
        for e, t in tables.items():
            a = t[arm]
            cells.append(f"epoch {e}: {a.mean():.3f} ({a.min():.3f}-{a.max():.3f})")
            values[f"rnn-acc-{key}-{e}"] = f"{a.mean():.3f}"
        lines.append(f"  {arm:8s}" + "  ".join(cells))
    return "\n".join(lines), values


def _pts(v) -> str:
    return v.text(digits=1, scale=100, unit=" pts")


def verdict_table(doc: dict, epochs=(1, race.EPOCHS)) -> tuple[str, dict]:
    """The verdicts of one results file after each of ``epochs`` with the marks of the
    family's Bonferroni correction; the family is every comparison after every epoch
    (:func:`~.race.family`). Returns ``(table, glue values)`` (``rnn-v-<a>-<b>-<epoch>``,
    lower case)."""
    family = race.family(doc)
    lines, values = [], {}
    for epoch in epochs:
        lines.append(f"after {epoch} epoch(s):")
        for (pair, e), (v, mark) in family.items():
            if e != epoch:
                continue
            mark_text = verdict_method.MARK if mark else " "
            lines.append(f"  {pair[0]:7s} vs {pair[1]:7s} {mark_text} {_pts(v)}")
            values[f"rnn-v-{pair[0]}-{pair[1]}-{epoch}".lower()] = _pts(v)
    verdicts = [v for v, _ in family.values()]
    lines += textwrap.wrap(verdict_method.family_sentence(verdicts), 80)
    return "\n".join(lines), values


def _glue_key(label: str) -> str:
    """``"LN-LSTM vs BN-LSTM, epoch 1"`` -> ``"ln-lstm-bn-lstm-1"``."""
    pair, epoch = label.split(", epoch ")
    a, b = pair.split(" vs ")
    return f"{a}-{b}-{epoch}".lower()


def pairs_table(pairs, epochs=(1, race.EPOCHS), width: int = 80) -> tuple[str, dict]:
    """The chapter's verdicts after each of ``epochs``: the confirmatory verdict (fresh
    seeds, with the mark of the Bonferroni correction over the confirmatory family of every
    comparison after every epoch) and the earlier run's beside it, exploratory.

    ``pairs``: ``lab.confirmatory.verdicts.rnn_pairs()`` (labels ``"<a> vs <b>, epoch
    <e>"``, the whole family). Returns ``(table, glue values)``: ``rnn-v-<a>-<b>-<epoch>``
    (the confirmatory verdict) and ``rnn-e-<a>-<b>-<epoch>`` (the earlier run's), lower
    case; ``ValueError`` if ``pairs`` lacks a comparison of ``epochs``."""
    by_label = {p.label: p for p in pairs}
    lines, values = [], {}
    for epoch in epochs:
        lines.append(f"after {epoch} epoch(s):")
        for a, b in race.COMPARISONS:
            label = f"{a} vs {b}, epoch {epoch}"
            if label not in by_label:
                raise ValueError(f"pairs: no comparison {label!r}")
            p = by_label[label]
            lines.append(p.text(width))
            values[f"rnn-v-{_glue_key(label)}"] = _pts(p.confirmatory)
            values[f"rnn-e-{_glue_key(label)}"] = _pts(p.exploratory)
    lines += textwrap.wrap(verdict_method.family_sentence([p.confirmatory for p in pairs]),
                           width)
    return "\n".join(lines), values


def best_decided(pairs) -> tuple[str, float, float]:
    """``(label, p, level)``: the confirmatory verdict with the smallest p behind a decided
    word, its p, and the Bonferroni level ``0.05 / m`` of the family of ``pairs``."""
    decided = [p for p in pairs if p.confirmatory.decided]
    if not decided:
        raise ValueError("no confirmatory word is decided")
    best = min(decided, key=lambda p: p.confirmatory.p)
    return best.label, best.confirmatory.p, verdict_method.ALPHA / len(pairs)


def epoch_words(pairs) -> str:
    """Every comparison after every epoch: the confirmatory word (with its mark) and the
    earlier run's word, one line per epoch (the exercise on budgets)."""
    by_label = {p.label: p for p in pairs}
    epochs = sorted({int(p.label.rsplit(" ", 1)[1]) for p in pairs})
    lines = ["confirmatory word (earlier run's word, exploratory)"]
    for a, b in race.COMPARISONS:
        lines.append(f"{a} vs {b}:")
        for e in epochs:
            p = by_label[f"{a} vs {b}, epoch {e}"]
            mark = verdict_method.MARK if p.mark else " "
            lines.append(f"  epoch {e}: {mark} {p.confirmatory.word} "
                         f"({p.exploratory.word})")
    decided = sum(p.confirmatory.decided for p in pairs)
    lines.append(f"confirmatory words other than 'not shown': {decided} of {len(pairs)}")
    return "\n".join(lines)


def replication_lines(rows: list[dict], paths_doc: dict) -> tuple[str, dict]:
    """Stored verdict, replicated verdict, same word?, effect inside the stored interval?
    Returns ``(text, glue values)``: ``rnn-rep-path``, ``rnn-rep-same``, ``rnn-rep-inside``,
    ``rnn-rep-n`` and the measured tolerance ``rnn-tol-spread``."""
    rep = paths_doc["replication"]
    m = rep["machine"]
    lines = [f"replicated on the path {rep['path']!r} "
             f"({m['cpu_capability']}, MKL_CBWR={m['environment'].get('MKL_CBWR')}):"]
    for r in rows:
        a, b = r["pair"]
        lines.append(f"{a} vs {b}, epoch {r['epoch']}:")
        lines.append(f"  stored     {_pts(r['stored'])}")
        lines.append(f"  replicated {_pts(r['replicated'])}")
        lines.append(f"  same word: {'yes' if r['same_word'] else 'NO'}; effect inside "
                     f"the stored interval: {'yes' if r['inside'] else 'NO'}")
    same = sum(r["same_word"] for r in rows)
    inside = sum(r["inside"] for r in rows)
    tol = paths_doc["tolerance"]
    lines.append(f"same word {same} of {len(rows)}; effect inside the stored interval "
                 f"{inside} of {len(rows)}")
    lines.append("live-check tolerance: relative spread of the epoch-1 loss")
    lines.append(f"  over {len(tol['values'])} paths {tol['loss_relative_spread']:.1e}")
    return "\n".join(lines), {"rnn-rep-path": rep["path"], "rnn-rep-same": f"{same}",
                              "rnn-rep-inside": f"{inside}", "rnn-rep-n": f"{len(rows)}",
                              "rnn-tol-spread": f"{tol['loss_relative_spread']:.1e}"}


def rate_grids(doc: dict) -> str:
    """The learning rates each arm tried on the tuning seeds, the chosen one in brackets.

    Raises ``AssertionError`` when a chosen rate sits on an edge of the rates its arm tried
    (the grid would cut off the answer)."""
    lines = ["learning rates tried on the tuning seeds, [chosen] by validation accuracy:"]
    for arm, chosen in doc["selected_lr"].items():
        tried = sorted({r["lr"] for r in doc["runs"]
                        if r["arm"] == arm and r["role"] == "tuning"})
        assert tried[0] < chosen < tried[-1], f"{arm}: chosen rate {chosen} on an edge"
        rates = " ".join(f"[{lr:g}]" if lr == chosen else f"{lr:g}" for lr in tried)
        lines.append(f"  {arm:8s}{rates}")
    return "\n".join(lines)


def replication_changes(doc: dict, paths_doc: dict) -> tuple[str, dict]:
    """Per arm, how many reported runs differ between the stored file and the replication.

    Compares each reported run (arm, seed) of ``doc`` with the same run in
    ``paths_doc["replication"]``: its test accuracy at any epoch, its test accuracy after
    the first epoch and its training loss at any epoch (as stored, 5 significant digits).
    Returns ``(text, glue values)``: ``rnn-rep-acc-arms`` (the arms whose test accuracy
    changed), ``rnn-rep-loss-runs`` (runs whose training loss changed) and ``rnn-rep-runs``.
    """
    again = {(r["arm"], r["seed"]): r for r in paths_doc["replication"]["runs"]}
    counts, loss_runs, n = {}, 0, 0
    for r in doc["runs"]:
        if r["role"] != "reported":
            continue
        q = again[(r["arm"], r["seed"])]
        acc = r["test_accuracy"] != q["test_accuracy"]
        first = r["test_accuracy"][0] != q["test_accuracy"][0]
        loss = r["train_loss"] != q["train_loss"]
        c = counts.setdefault(r["arm"], [0, 0, 0, 0])
        c[0] += acc
        c[1] += first
        c[2] += loss
        c[3] += 1
        loss_runs += loss
        n += 1
    seeds = max(c[3] for c in counts.values())
    lines = [f"reported runs that differ on the second path (of {seeds} seeds per arm):",
             f"  {'':8s}{'test acc.':>11s}{'acc. epoch 1':>15s}{'train loss':>15s}"]
    for arm, (acc, first, loss, _) in counts.items():
        lines.append(f"  {arm:8s}{acc:>11d}{first:>15d}{loss:>15d}")
    changed = [arm for arm, c in counts.items() if c[0]]
    return "\n".join(lines), {"rnn-rep-acc-arms": ", ".join(changed) or "none",
                              "rnn-rep-loss-runs": f"{loss_runs}", "rnn-rep-runs": f"{n}"}


def registration_lines(doc: dict) -> str:
    """The claim's threshold, the registry's disclosure for this chapter (thresholds
    committed together with their first data) and the registration note (the registry
    entry's date against the results' date), wrapped to 80 columns."""
    from layernorm_tutorial.lab.common import claims

    parts = [f"threshold (claim {race.CLAIM}, in the registry): "
             f"{race.THRESHOLD * 100:.0f} points of test accuracy"]
    parts += [d for d in claims.DISCLOSURES if d.startswith("rnn")]
    parts.append(claims.registration_note(race.CLAIM, doc))
    return "\n".join(textwrap.fill(p, 80) for p in parts)
