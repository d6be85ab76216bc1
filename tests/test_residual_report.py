"""The residual chapter's bookkeeping (lab.residual.report and lab.residual.paths): tables
within 80 columns, the values its prose quotes, the identity check, the live check's
tolerance rule and the replication table."""

import numpy as np
import pytest

from layernorm_tutorial.lab.common import stored_results
from layernorm_tutorial.lab.residual import experiments, paths, report, sweep


def _width(text):
    return max(len(line) for line in text.splitlines())


def test_probe_gone_layer_is_where_r2_stays_below_the_level():
    assert report.probe_gone_layer(np.array([1.0, 0.5, 0.04, 0.06, 0.01, 0.0])) == 4
    assert report.probe_gone_layer(np.array([1.0, 0.5])) == 2  # never gone


def test_variance_summary_on_real_small_stacks():
    size = dict(depth=40, width=16, batch_size=64, seed=0)
    stacks = {"plain + LN": "plain", "residual, LN in F": "residual",
              "residual, no LN": "residual_no_norm"}
    variance = {k: experiments.residual_variance_by_depth(architecture=a, **size)
                for k, a in stacks.items()}
    probes = {k: experiments.input_probe_by_depth(architecture=stacks[k], **size)
              for k in ("plain + LN", "residual, LN in F")}
    s = report.VarianceSummary(variance, probes)
    assert _width(s.table()) <= 80
    values = s.glue_values()
    assert {"res-pred-err", "res-nonorm-pred-err", "res-probe-plain-gone"} <= set(values)
    assert values["res-pred-err"].endswith("%")


def test_covariance_terms_check_the_identity():
    runs = [experiments.residual_variance_by_depth(depth=10, width=16, batch_size=32,
                                                   architecture="residual", seed=s)
            for s in range(3)]
    terms = report.covariance_terms(runs)
    assert terms.terms.shape == (3, 3) and _width(terms.table()) <= 80
    inc, branch, cov = terms.terms.T
    np.testing.assert_allclose(inc, branch + cov, atol=1e-9)
    broken = dict(runs[0], predicted=runs[0]["predicted"] + 1.0)
    broken["variance"] = runs[0]["variance"]
    broken["branch_variance"] = runs[0]["branch_variance"] + 0.5
    with pytest.raises(AssertionError, match="identity fails"):
        report.covariance_terms([broken])


def test_gradient_summary_scaling_of_the_bounds():
    rng = np.random.default_rng(0)
    grads = {(n, d): rng.uniform(0.1, 0.3, size=(5, d)) for n in sweep.ARRANGEMENTS
             for d in (6, 12, 24)}
    g = report.GradientSummary(grads)
    assert g.bound_scaling("pre-LN", 24, 6) == pytest.approx(0.5)
    assert g.bound_scaling("post-LN", 24, 6) == 1.0
    assert g.ratio("pre-LN", 6) == pytest.approx(grads[("pre-LN", 6)][:, -1]
                                                 / grads[("pre-LN", 6)][:, 0])
    assert _width(g.table()) <= 80
    values = g.glue_values()
    assert "res-xiong-pre-24-pred" in values and "res-xiong-pre-6" not in values


def test_stored_tables_fit_and_glue_every_quoted_value():
    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    table, values = report.schedule_table(doc)
    assert _width(table) <= 80 and len(values) == 9
    for part, n in (("schedules", 6), ("depth", 3)):
        table, values = report.verdict_table(doc, part)
        assert _width(table) <= 80 and len(values) == n and "Bonferroni" in table
    table, values = report.depth_table(doc)
    assert _width(table) <= 80 and len(values) == 12
    table, values = report.first_step_table(doc)
    assert _width(table) <= 80 and "res-late-ratio-post-0" in values
    with pytest.raises(ValueError, match="part must be"):
        report.verdict_table(doc, "everything")


def test_replication_and_live_check(monkeypatch):
    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    shifted = [dict(r, loss=[x + (0.3 if r["schedule"] == "warm-up" else 0.0)
                             for x in r["loss"]]) for r in doc["runs"]]
    pdoc = {"replication": {"path": "avx2", "runs": shifted,
                            "machine": {"cpu_capability": "AVX2",
                                        "environment": {"MKL_CBWR": "AVX2"}}},
            "tolerance": {"values": {"a": 1}, "relative_spread": 1e-3,
                          "kwargs": paths.CHECK}}
    rows = paths.replication_table(doc, pdoc)
    depth = [r for r in rows if "blocks" in r["label"]]
    assert all(r["same_word"] and r["inside"] for r in depth)  # untouched runs
    warm = [r for r in rows if "warm-up vs" in r["label"]]
    assert not any(r["inside"] for r in warm)  # warm-up lost 0.3 nats
    text, values = report.replication_lines(rows, pdoc)
    assert _width(text) <= 80 and values["res-rep-n"] == "9"
    stored = sweep.select(doc, "post-LN", 6, "no warm-up")[0]["loss"]
    monkeypatch.setattr(sweep, "retrain_losses", lambda **c: [x * 1.005 for x in stored])
    check = paths.live_check(doc, pdoc)
    assert check.allowed == pytest.approx(10 * 1e-3 + 5e-4)
    assert check.within and "this machine's run" in check.report()
    monkeypatch.setattr(sweep, "retrain_losses", lambda **c: [x * 1.02 for x in stored])
    assert not paths.live_check(doc, pdoc).within


def test_committed_paths_file_replicates_every_stored_run():
    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    pdoc = stored_results.load_results(paths.COMMITTED_PATH)
    rep = pdoc["replication"]
    assert rep["machine"]["environment"] == {"ATEN_CPU_CAPABILITY": "default",
                                             "MKL_CBWR": "COMPATIBLE"}
    key = ("arrangement", "layers", "schedule", "seed")
    assert sorted(tuple(r[k] for k in key) for r in rep["runs"]) == sorted(
        tuple(r[k] for k in key) for r in doc["runs"])
    assert pdoc["tolerance"]["kwargs"] == paths.CHECK
    assert len(pdoc["tolerance"]["values"]) >= 3


def test_registration_lines_carry_the_disclosure_and_the_dates():
    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    text = report.registration_lines("residual.depth", doc)
    assert max(len(line) for line in text.splitlines()) <= 80
    assert "committed together with their data" in text and "registered " in text


def test_pairs_table_prints_the_confirmatory_verdicts_with_the_earlier_beside_them():
    from layernorm_tutorial.lab.confirmatory import verdicts

    doc = stored_results.load_results(sweep.COMMITTED_PATH)
    conf = verdicts.load("residual_runs_confirmatory.json")
    pairs = verdicts.residual_pairs(conf, doc)
    for part, n in (("schedules", 6), ("depth", 3)):
        table, values = report.pairs_table(pairs, part)
        assert _width(table) <= 80 and "Bonferroni" in table
        assert table.count("confirmatory: ") == n
        assert sorted(k for k in values if k.startswith("res-v-")) == sorted(
            report.verdict_table(conf, part)[1])
        assert all(values[k].startswith("exploratory, ") for k in values
                   if k.startswith("res-e-"))
    # the confirmatory words are the confirmatory file's, the earlier ones the stored file's
    _, values = report.pairs_table(pairs, "depth")
    assert values["res-v-depth-24"] == report.verdict_table(conf, "depth")[1]["res-v-depth-24"]
    assert values["res-e-depth-24"].removeprefix("exploratory, ") == \
        report.verdict_table(doc, "depth")[1]["res-v-depth-24"]
    with pytest.raises(ValueError, match="part must be"):
        report.pairs_table(pairs, "everything")
