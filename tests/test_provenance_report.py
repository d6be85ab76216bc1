"""The page "How these numbers were made": every stored run listed with its provenance."""

import json

from layernorm_tutorial.lab.common import provenance_report, stored_results


def test_every_stored_file_belongs_to_a_chapter():
    assert provenance_report.unlisted_files() == []


def test_the_report_fits_the_page_and_names_every_file():
    rows = provenance_report.describe_all()
    text = provenance_report.format_report(rows)
    assert max(len(line) for line in text.splitlines()) <= 80
    for row in rows:
        assert row["file"] in text


def test_a_new_run_reports_its_machine_and_run_time(tmp_path):
    doc = {**stored_results.provenance("python -m x", {"a": 1}, 90.0), "result": 1}
    path = tmp_path / "rnn_new.json"
    path.write_text(json.dumps(doc))
    row = provenance_report.describe(path)
    assert row["chapter"] == "RNNs" and row["command"] == "python -m x"
    assert doc["machine"]["cpu_capability"] in row["machine"]
    assert row["date"] == doc["machine"]["date"] and row["seconds"] == 90.0
    assert "1.5 min" in provenance_report.format_report([row])


def test_an_old_file_says_what_it_does_not_record(tmp_path):
    path = tmp_path / "evidence_old.json"
    path.write_text(json.dumps({"command": "c", "versions": {"torch": "2.0"}}))
    row = provenance_report.describe(path)
    assert row["machine"].startswith("not recorded") and "torch 2.0" in row["machine"]
    assert row["date"] is None and row["seconds"] is None


def test_a_file_written_in_parts_lists_every_command(tmp_path):
    doc = {**stored_results.provenance("python -m x --sections b", {}, 1.0),
           "previous_runs": [{"command": "python -m x --sections a"}]}
    path = tmp_path / "large_models_x.json"
    path.write_text(json.dumps(doc))
    assert provenance_report.describe(path)["command"] == \
        "python -m x --sections a ; then python -m x --sections b"


def test_machine_paths_in_a_command_are_not_shown(tmp_path):
    path = tmp_path / "gpu_x.json"
    path.write_text(json.dumps({"command": "bench --csv /tmp/b.csv --json book/data/x.json"}))
    assert provenance_report.describe(path)["command"] == \
        "bench --csv PATH --json book/data/x.json"
