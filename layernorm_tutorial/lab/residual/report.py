"""The residual chapter's bookkeeping: tables within 80 columns and the values its prose quotes.

Each summary takes what an experiment of :mod:`~.experiments` or :mod:`~.sweep` returned and
offers ``table()`` (the printed lines) and ``glue_values()`` (``{name: text}``, the numbers the
chapter's prose quotes through ``glue``). The notebook cells then show what is measured and
what is judged; the formatting lives here, tested.
"""

from __future__ import annotations

import math
import textwrap
from dataclasses import dataclass

import numpy as np

from layernorm_tutorial.lab.common import verdict as verdict_method
from layernorm_tutorial.lab.residual import sweep

__all__ = ["CovarianceSummary", "GradientSummary", "VarianceSummary", "covariance_terms",
           "depth_table", "first_step_table", "probe_gone_layer", "registration_lines",
           "replication_lines", "schedule_table", "verdict_table", "pairs_table"]

_PROBE_LAYERS = (1, 2, 5, 10, 40)
_OTHER = {"no warm-up": "no warm-up",
          "constant, warm-up's mean rate": "its mean rate held constant",
          "constant, warm-up's first rate": "its first rate held constant"}


def _short(arrangement: str) -> str:
    """``"post-LN"`` -> ``"post"``."""
    return arrangement[:-3].lower()


def probe_gone_layer(r2: np.ndarray, level: float = 0.05) -> int:
    """The first layer from which the probe's R^2 stays below ``level`` at every later layer
    (``len(r2)`` if it never does)."""
    r2 = np.asarray(r2)
    below = np.maximum.accumulate(r2[::-1])[::-1] < level
    return int(np.argmax(below)) if below.any() else len(r2)


@dataclass(frozen=True)
class VarianceSummary:
    """``variance``: ``{label: residual_variance_by_depth(...)}`` (three stacks);
    ``probes``: ``{label: input_probe_by_depth(...)}`` (plain and residual with LN)."""

    variance: dict
    probes: dict

    def prediction_error(self, label: str) -> float:
        """Largest ``|measured / predicted - 1|`` over the layers."""
        r = self.variance[label]
        return float(np.abs(r["variance"][1:] / r["predicted"] - 1).max())

    @property
    def gone(self) -> int:
        return probe_gone_layer(self.probes["plain + LN"]["probe_r2"])

    def table(self) -> str:
        lines = [f"{'stack':18s} {'v_0':>5s} {'v_10':>8s} {'v_40':>9s} "
                 f"{'mean Var(F)':>11s}  max |meas/pred - 1|"]
        for label, r in self.variance.items():
            v = r["variance"]
            lines.append(f"{label:18s} {v[0]:5.2f} {v[10]:8.3g} {v[40]:9.3g} "
                         f"{r['branch_variance'].mean():11.3g}  "
                         f"{self.prediction_error(label):.3f}")
        lines += ["", "what is left of x_0 at layer l: held-out linear-probe R^2, and",
                  "the correlation of the entries of x_1 and x_40 with those of x_0"]
        lines.append(f"{'':18s} " + " ".join(f"{'l=' + str(k):>5s}" for k in _PROBE_LAYERS)
                     + "  corr_1  corr_40")
        for label, q in self.probes.items():
            r2 = " ".join(f"{q['probe_r2'][layer]:5.2f}" for layer in _PROBE_LAYERS)
            lines.append(f"{label:18s} {r2}  {q['input_correlation'][1]:6.3f}  "
                         f"{self.variance[label]['input_correlation'][40]:7.3f}")
        lines.append(f"plain + LN: probe R^2 below 0.05 from layer {self.gone} on")
        return "\n".join(lines)

    def glue_values(self) -> dict[str, str]:
        res, no_ln = self.variance["residual, LN in F"], self.variance["residual, no LN"]
        plain = self.probes["plain + LN"]
        residual = self.probes["residual, LN in F"]["probe_r2"]
        growth = (no_ln["variance"][40] / no_ln["variance"][0]) ** (1 / 40)
        return {
            "res-v40": f"{res['variance'][40]:.1f}",
            "res-corr40": f"{res['input_correlation'][40]:.2f}",
            "res-sqrt-ratio": f"{math.sqrt(res['variance'][0] / res['variance'][40]):.2f}",
            "res-pred-err": f"{self.prediction_error('residual, LN in F'):.0%}",
            "res-nonorm-pred-err": f"{self.prediction_error('residual, no LN'):.0%}",
            "res-nonorm-growth": f"{growth:.2f}",
            "res-plain-corr1": f"{plain['input_correlation'][1]:.3f}",
            "res-probe-plain-1": f"{plain['probe_r2'][1]:.2f}",
            "res-probe-plain-2": f"{plain['probe_r2'][2]:.2f}",
            "res-probe-plain-gone": f"{self.gone}",
            "res-probe-res-1": f"{residual[1]:.2f}",
            "res-probe-res-40": f"{residual[40]:.2f}",
        }


@dataclass(frozen=True)
class CovarianceSummary:
    """Per initialization: the increase of ``v_l`` per block, the mean branch variance and
    the mean covariance term (rows of ``terms``, shape ``(n, 3)``)."""

    terms: np.ndarray

    @property
    def covariance(self) -> np.ndarray:
        return self.terms[:, 2]

    @property
    def standard_error(self) -> float:
        c = self.covariance
        return float(c.std(ddof=1) / np.sqrt(len(c)))

    @property
    def relative(self) -> np.ndarray:
        """``|covariance term| / branch variance`` per initialization."""
        return np.abs(self.terms[:, 2]) / self.terms[:, 1]

    def table(self, shown: int = 5) -> str:
        c, n = self.covariance, len(self.terms)
        lines = ["increase of v_l per block = mean Var(F) + mean 2 Cov"]
        lines += [f"  seed {s}: {inc:.3f} = {br:.3f} + ({cov:+.3f})"
                  for s, (inc, br, cov) in enumerate(self.terms[:shown])]
        lines += [f"  {n} initializations: covariance term {c.mean():+.3f} on average",
                  f"  (standard error {self.standard_error:.3f}), negative in "
                  f"{(c < 0).sum()} of {n},",
                  f"  from {c.min():+.3f} to {c.max():+.3f}; largest |term| / branch "
                  f"variance {self.relative.max():.0%}"]
        return "\n".join(lines)

    def glue_values(self) -> dict[str, str]:
        c = self.covariance
        return {"res-inc-0": f"{self.terms[0, 0]:.2f}",
                "res-branch-0": f"{self.terms[0, 1]:.2f}",
                "res-cov-mean": f"{c.mean():+.3f}",
                "res-cov-se": f"{self.standard_error:.3f}",
                "res-cov-negative": f"{(c < 0).sum()}",
                "res-cov-min": f"{c.min():+.3f}",
                "res-cov-max": f"{c.max():+.3f}",
                "res-cov-rel-max": f"{self.relative.max():.0%}"}


def covariance_terms(runs: list[dict], tol: float = 1e-9) -> CovarianceSummary:
    """Both sides of eq. (residual-increase) for each run of
    :func:`~.experiments.residual_variance_by_depth`; raises ``AssertionError`` if the
    identity ``increase = mean Var(F) + mean 2 Cov`` fails by more than ``tol``."""
    terms = []
    for r in runs:
        depth = len(r["variance"]) - 1
        increase = (r["variance"][depth] - r["variance"][0]) / depth
        branch = float(np.mean(r["branch_variance"]))
        covariance = float(np.mean(r["variance"][1:] - r["predicted"]))
        if abs(increase - (branch + covariance)) >= tol:
            raise AssertionError(f"identity fails: {increase} != {branch} + {covariance}")
        terms.append((increase, branch, covariance))
    return CovarianceSummary(np.array(terms))


@dataclass(frozen=True)
class GradientSummary:
    """``grads``: ``{(arrangement, layers): array (seeds, layers)}`` of ``||dL/dW2||`` at
    initialization (:func:`~.experiments.gradient_norm_per_layer`)."""

    grads: dict

    def ratio(self, name: str, layers: int) -> np.ndarray:
        """Last block's gradient over the first block's, per initialization."""
        g = self.grads[(name, layers)]
        return g[:, -1] / g[:, 0]

    def depths(self) -> list[int]:
        return sorted({layers for _, layers in self.grads})

    def measured_scaling(self, name: str, layers: int) -> float:
        """Mean last-block gradient at ``layers`` over the same at the smallest depth."""
        base = min(self.depths())
        return float(self.grads[(name, layers)][:, -1].mean()
                     / self.grads[(name, base)][:, -1].mean())

    @staticmethod
    def bound_scaling(name: str, layers: int, base: int) -> float:
        """Xiong et al.'s bounds: flat for post-LN, ``sqrt(base / layers)`` for pre-LN."""
        return 1.0 if name == "post-LN" else math.sqrt(base / layers)

    def table(self) -> str:
        lines = ["||dL/dW2|| at initialization, mean ± sd over initializations",
                 "                 block 1         last block      last / first"]
        for (name, layers), g in self.grads.items():
            r = self.ratio(name, layers)
            lines.append(f"{name:7s} {layers:2d} blocks {g[:, 0].mean():.3f} ± "
                         f"{g[:, 0].std():.3f}   {g[:, -1].mean():.3f} ± {g[:, -1].std():.3f}"
                         f"   {r.min():.2f} to {r.max():.2f}")
        base = min(self.depths())
        lines += ["", f"last block's mean gradient at L blocks / at {base} blocks:"]
        for name in sweep.ARRANGEMENTS:
            for layers in self.depths()[1:]:
                lines.append(f"  {name:7s} {layers} blocks: bound's scaling "
                             f"{self.bound_scaling(name, layers, base):.2f}, measured "
                             f"{self.measured_scaling(name, layers):.2f}")
        return "\n".join(lines)

    def glue_values(self) -> dict[str, str]:
        out = {}
        base = min(self.depths())
        for (name, layers), g in self.grads.items():
            r = self.ratio(name, layers)
            key = f"{_short(name)}-{layers}"
            out[f"res-grad-{key}-ratio"] = f"{r.min():.2f}–{r.max():.2f}"
            out[f"res-grad-{key}-last"] = f"{g[:, -1].mean():.3f}"
            if layers != base:
                out[f"res-xiong-{key}-pred"] = f"{self.bound_scaling(name, layers, base):.2f}"
                out[f"res-xiong-{key}"] = f"{self.measured_scaling(name, layers):.2f}"
        pre = np.concatenate([self.ratio("pre-LN", d) for d in self.depths()])
        out["res-grad-pre-ratio-max"] = f"{pre.max():.2f}"
        return out


def _losses_line(label: str, losses: np.ndarray, width: int) -> str:
    return f"  {label:{width}s} " + " ".join(f"{v:.3f}" for v in losses)


def schedule_table(doc: dict, layers: int = sweep.SCHEDULE_LAYERS) -> tuple[str, dict]:
    """The loss over the last steps per seed for every arrangement and schedule; returns
    ``(table, glue values)`` (the per-arm ranges as ``res-wu-<post|pre>-<schedule index>``,
    and the mean-rate control's rate as ``res-mean-rate``)."""
    schedules = list(sweep.SCHEDULES)
    rates = ", ".join(f"{k} {v[0]:.4g}" for k, v in sweep.SCHEDULES.items())
    lines = [*textwrap.wrap(f"rates: {rates}", 80),
             f"chance ln {sweep.VOCAB_SIZE} = {sweep.chance_loss():.3f}; loss over the last "
             f"{sweep.LAST} of {sweep.STEPS} steps, per seed:"]
    values = {"res-mean-rate": f"{sweep.MEAN_RATE:.4g}"}
    for name in sweep.ARRANGEMENTS:
        lines.append(f" {name}")
        for i, schedule in enumerate(schedules):
            losses = sweep.final_losses(doc, name, layers, schedule)
            label = schedule.replace("constant, warm-up's", "constant,")
            lines.append(_losses_line(label, losses, 20))
            values[f"res-wu-{_short(name)}-{i}"] = f"{losses.min():.2f}–{losses.max():.2f}"
    return "\n".join(lines), values


def depth_table(doc: dict) -> tuple[str, dict]:
    """Loss over the last steps per seed and how many seeds started (at least 0.1 nats below
    chance), per arrangement and depth without warm-up; returns ``(table, glue values)``."""
    chance = sweep.chance_loss()
    lines = [f"loss over the last {sweep.LAST} of {sweep.STEPS} steps, per seed "
             f"(chance {chance:.3f}):"]
    values = {}
    for name in sweep.ARRANGEMENTS:
        for layers in sweep.DEPTHS:
            last = sweep.final_losses(doc, name, layers, "no warm-up")
            started = int((last < chance - 0.1).sum())
            lines.append(f"{name:7s} {layers:2d} blocks: "
                         + " ".join(f"{v:.3f}" for v in last)
                         + f"  started {started} of {len(last)}")
            key = f"res-depth-{_short(name)}-{layers}"
            values[key] = f"{last.min():.2f}–{last.max():.2f}"
            values[f"{key}-started"] = f"{started}"
    return "\n".join(lines), values


def verdict_table(doc: dict, part: str) -> tuple[str, dict]:
    """One part (``"schedules"`` or ``"depth"``) of the nine verdicts of one results file,
    with the marks of the Bonferroni correction over the whole family
    (:func:`~.sweep.family`), within 80 columns; returns
    ``(table, glue values)``: ``res-v-<post|pre>-wu-<schedule index>`` or
    ``res-v-depth-<layers>``."""
    if part not in ("schedules", "depth"):
        raise ValueError(f"part must be 'schedules' or 'depth', got {part!r}")
    family = sweep.family(doc)
    schedules = list(sweep.SCHEDULES)
    kw = {"digits": 2, "unit": " nats"}
    lines, values = [], {}
    for label, (v, mark) in family.items():
        is_depth = label.endswith("pre-LN vs post-LN")
        if is_depth != (part == "depth"):
            continue
        text = f"{verdict_method.MARK if mark else ' '} {v.text(**kw)}"
        if is_depth:
            layers = int(label.split()[0])
            values[f"res-v-depth-{layers}"] = v.text(**kw)
            lines.append(f"  {layers:2d} blocks {text}")
        else:
            name, other = label.split(", warm-up vs ")
            values[f"res-v-{_short(name)}-wu-{schedules.index(other)}"] = v.text(**kw)
            lines.append(f"  {name}, warm-up vs {_OTHER[other]}:")
            lines.append(f"      {text}")
    verdicts = [v for v, _ in family.values()]
    lines += textwrap.wrap(verdict_method.family_sentence(verdicts), 80)
    return "\n".join(lines), values


def _glue_key(label: str) -> str:
    """A label of :func:`~.sweep.all_verdicts` -> its glue name: ``res-v-<post|pre>-wu-<
    schedule index>`` or ``res-v-depth-<layers>``."""
    if label.endswith("pre-LN vs post-LN"):
        return f"res-v-depth-{int(label.split()[0])}"
    name, other = label.split(", warm-up vs ")
    return f"res-v-{_short(name)}-wu-{list(sweep.SCHEDULES).index(other)}"


def pairs_table(pairs, part: str, width: int = 80) -> tuple[str, dict]:
    """One part (``"schedules"`` or ``"depth"``) of the chapter's nine verdicts: the
    confirmatory verdict (fresh seeds, with the mark of the Bonferroni correction over the
    nine confirmatory verdicts) and the earlier run's beside it, exploratory.

    ``pairs``: ``lab.confirmatory.verdicts.residual_pairs()`` (labels of
    :func:`~.sweep.all_verdicts`). Returns ``(table, glue values)``: the names of
    :func:`verdict_table` for the confirmatory verdicts, the same with ``res-e-`` for the
    earlier run's (exploratory)."""
    if part not in ("schedules", "depth"):
        raise ValueError(f"part must be 'schedules' or 'depth', got {part!r}")
    kw = {"digits": 2, "unit": " nats"}
    lines, values = [], {}
    for p in pairs:
        if p.label.endswith("pre-LN vs post-LN") != (part == "depth"):
            continue
        key = _glue_key(p.label)
        lines.append(p.text(width))
        values[key] = p.confirmatory.text(**kw)
        values[key.replace("res-v-", "res-e-", 1)] = p.exploratory.text(**kw)
    lines += textwrap.wrap(verdict_method.family_sentence([p.confirmatory for p in pairs]),
                           width)
    return "\n".join(lines), values


def first_step_table(doc: dict, layers: int = sweep.SCHEDULE_LAYERS) -> tuple[str, dict]:
    """First-step update sizes and output changes, and the gradient norms at step 0 and over
    steps 10 to 29, mean over seeds, with and without warm-up; returns
    ``(table, glue values)``."""
    lines = ["first step, mean over seeds: |dW2|/|W2| in block 1 and in the last block;",
             "RMS change of the logits"]
    grad_lines = ["gradient norm ||dL/dW2||, mean over seeds and blocks: step 0,",
                  "steps 10 to 29, and last block / block 1 over steps 10 to 29"]
    values = {}
    for name in sweep.ARRANGEMENTS:
        for w in (0, sweep.WARMUP_STEPS):
            schedule = "warm-up" if w else "no warm-up"
            label = f"{name}, {'warm-up' if w else 'no warm-up'}"
            ratio = sweep.stacked(doc, name, layers, schedule, "first_update_ratio")
            out = sweep.stacked(doc, name, layers, schedule, "first_output_change")
            g = sweep.stacked(doc, name, layers, schedule, "grad_norm")  # (seeds, steps, L)
            late = g[:, 10:].mean()
            balance = g[:, 10:, -1].mean() / g[:, 10:, 0].mean()
            lines.append(f"  {label:20s} {ratio[:, 0].mean():.3f}  {ratio[:, -1].mean():.3f}"
                         f"   {out.mean():.2f}")
            grad_lines.append(f"  {label:20s} {g[:, 0].mean():.3f}  {late:.3f}  "
                              f"{balance:.1f}")
            short = f"{_short(name)}-{w}"
            values[f"res-upd-{short}"] = f"{ratio.mean():.3f}"
            values[f"res-out-{short}"] = f"{out.mean():.2f}"
            values[f"res-late-{short}"] = f"{late:.3f}"
            values[f"res-late-ratio-{short}"] = f"{balance:.1f}"
            if w == 0:  # step 0 comes before any update: the same with or without warm-up
                values[f"res-first-{_short(name)}"] = f"{g[:, 0].mean():.3f}"
    return "\n".join(lines + grad_lines), values


def replication_lines(rows: list[dict], paths_doc: dict) -> tuple[str, dict]:
    """The stored and the replicated verdicts (:func:`~.paths.replication_table`), where
    the replication ran, and the measured tolerance; returns ``(text, glue values)``:
    ``res-rep-path``, ``res-rep-same`` (same word, count), ``res-rep-inside`` (effect
    inside the stored interval, count), ``res-rep-n``, ``res-tol-spread``."""
    kw = {"digits": 2, "unit": " nats"}
    rep = paths_doc["replication"]
    m = rep["machine"]
    lines = [f"replicated on the path {rep['path']!r} "
             f"({m['cpu_capability']}, MKL_CBWR={m['environment'].get('MKL_CBWR')}):"]
    for r in rows:
        lines.append(f"{r['label']}:")
        lines.append(f"  stored     {r['stored'].text(**kw)}")
        lines.append(f"  replicated {r['replicated'].text(**kw)}")
        lines.append(f"  same word: {'yes' if r['same_word'] else 'NO'}; effect inside "
                     f"the stored interval: {'yes' if r['inside'] else 'NO'}")
    same = sum(r["same_word"] for r in rows)
    inside = sum(r["inside"] for r in rows)
    tol = paths_doc["tolerance"]
    lines.append(f"same word {same} of {len(rows)}; effect inside the stored interval "
                 f"{inside} of {len(rows)}")
    lines.append("live-check tolerance: relative spread of one run's loss curve")
    lines.append(f"  over {len(tol['values'])} paths {tol['relative_spread']:.1e}")
    return "\n".join(lines), {"res-rep-path": rep["path"], "res-rep-same": f"{same}",
                              "res-rep-inside": f"{inside}", "res-rep-n": f"{len(rows)}",
                              "res-tol-spread": f"{tol['relative_spread']:.1e}"}


def registration_lines(claim_id: str, doc: dict) -> str:
    """The registry's disclosure for this chapter (thresholds committed together with their
    first data) and the registration note of ``claim_id`` (the registry entry's date
    against the results' date), wrapped to 80 columns."""
    from layernorm_tutorial.lab.common import claims

    parts = [d for d in claims.DISCLOSURES if "residual" in d.split(":")[0]]
    parts.append(claims.registration_note(claim_id, doc))
    return "\n".join(textwrap.fill(p, 80) for p in parts)
