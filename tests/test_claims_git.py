"""Registrations a reader can verify: each claim's recorded registration commit is read with
``git show <commit>:<path>`` and what it registered there (metric, direction, threshold,
seeds, ...) must be what the registry judges today (issue 42, item 1).

A definition hash stored next to the results only catches an accidental edit: whoever edits a
threshold can edit its hash too. The history cannot be edited that way. Two kinds of
registration are read:

- **in the registry** (``lab/common/claims.py``, from commit d6a35ec on): the old source is
  parsed with :mod:`ast` (no code of it runs) and the claim's whole definition
  (:func:`claims.definition`) is compared; so is each confirmatory plan
  (:data:`claims.CONFIRMATIONS`) at :data:`claims.CONFIRMATIONS_REGISTERED`;
- **before the registry** (:data:`claims.LEGACY_SOURCES`): the threshold lived in a module
  constant or a notebook cell; that constant (and the metric parameters kept beside it) is
  read and compared. Metric, direction and seeds lived in code then, so only the constants
  are checked for these; the chapters' verdicts are the confirmatory ones, fully checked.

Without the history (a download, or a shallow clone) the tests that need it skip and say why;
the demonstration that an edited threshold fails, even with its hash edited too, builds its
own small repository and runs wherever ``git`` is installed.
"""

from __future__ import annotations

import ast
import json
import re
import shutil
import subprocess
from pathlib import Path

import pytest

from layernorm_tutorial.lab.common import claims as C

REPO = C._REPO


# ---- reading a registration from git ----------------------------------------------------------

def _git(repo: Path, *args: str) -> subprocess.CompletedProcess:
    return subprocess.run(["git", *args], cwd=repo, capture_output=True, text=True, timeout=60)


def history_missing(repo: Path = REPO) -> str | None:
    """Why the registration commits cannot be read here, or ``None`` when they can."""
    if shutil.which("git") is None:
        return "git is not installed"
    if _git(repo, "rev-parse", "--git-dir").returncode != 0:
        return "no git history: the repository was downloaded without .git"
    if _git(repo, "rev-parse", "--is-shallow-repository").stdout.strip() == "true":
        return "shallow clone: the registration commits are not in this history " \
               "(git fetch --unshallow)"
    commits = {c.registered[0] for c in C.CLAIMS if c.registered}
    commits |= {C.confirmation_registered(p.claim_id)[0] for p in C.CONFIRMATIONS}
    missing = sorted(c for c in commits
                     if _git(repo, "cat-file", "-e", f"{c}^{{commit}}").returncode != 0)
    return f"registration commits not in this history: {missing}" if missing else None


def show(repo: Path, commit: str, path: str) -> str:
    out = _git(repo, "show", f"{commit}:{path}")
    if out.returncode != 0:
        raise FileNotFoundError(f"{path} does not exist at {commit}: {out.stderr.strip()}")
    return out.stdout


def _evaluate(node: ast.AST, env: dict):
    """The value of a literal expression of the registry's source: constants, tuples,
    names bound earlier, ``+ - * /``, calls of its dataclasses, and ``*(X(...) for v in
    (...))``. Anything else raises ``ValueError``: nothing of the source is executed."""
    if isinstance(node, ast.Constant):
        return node.value
    if isinstance(node, (ast.Tuple, ast.List)):
        out = []
        for elt in node.elts:
            if isinstance(elt, ast.Starred):
                out.extend(_evaluate(elt.value, env))
            else:
                out.append(_evaluate(elt, env))
        return tuple(out)
    if isinstance(node, ast.Name):
        if node.id not in env:
            raise ValueError(f"unknown name {node.id}")
        return env[node.id]
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, ast.USub):
        return -_evaluate(node.operand, env)
    if isinstance(node, ast.BinOp):
        a, b = _evaluate(node.left, env), _evaluate(node.right, env)
        ops = {ast.Add: lambda: a + b, ast.Sub: lambda: a - b, ast.Mult: lambda: a * b,
               ast.Div: lambda: a / b}
        if type(node.op) in ops:
            return ops[type(node.op)]()
    if isinstance(node, ast.GeneratorExp) and len(node.generators) == 1:
        gen = node.generators[0]
        if isinstance(gen.target, ast.Name) and not gen.ifs:
            return tuple(_evaluate(node.elt, {**env, gen.target.id: v})
                         for v in _evaluate(gen.iter, env))
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name):
        classes = env["__dataclasses__"]
        if node.func.id in classes:
            names, defaults = classes[node.func.id]
            record = dict(defaults)
            for name, arg in zip(names, node.args, strict=False):
                record[name] = _evaluate(arg, env)
            for kw in node.keywords:
                record[kw.arg] = _evaluate(kw.value, env)
            return {"__class__": node.func.id, **record}
        if node.func.id == "field":   # dataclasses.field(default=...)
            return {kw.arg: _evaluate(kw.value, env) for kw in node.keywords}.get("default")
    raise ValueError(f"not a literal: {ast.dump(node)[:80]}")


def registry_definitions(source: str) -> tuple[dict, dict]:
    """``({claim id: record}, {claim id: confirmation record})`` of a ``claims.py`` source."""
    tree = ast.parse(source)
    classes = {}
    for node in tree.body:
        if isinstance(node, ast.ClassDef):
            names, defaults = [], {}
            for item in node.body:
                if isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
                    names.append(item.target.id)
                    if item.value is not None:
                        defaults[item.target.id] = _evaluate(
                            item.value, {"__dataclasses__": {}})
            classes[node.name] = (names, defaults)
    env: dict = {"__dataclasses__": classes}
    for node in tree.body:
        value = node.value if isinstance(node, (ast.Assign, ast.AnnAssign)) else None
        if value is None:
            continue
        targets = node.targets if isinstance(node, ast.Assign) else [node.target]
        try:
            result = _evaluate(value, env)
        except (ValueError, KeyError, TypeError):
            continue
        for t in targets:
            if isinstance(t, ast.Name):
                env[t.id] = result
    claims = {r["id"]: r for r in env.get("CLAIMS", ())}
    confirmations = {r["claim_id"]: r for r in env.get("CONFIRMATIONS", ())}
    return claims, confirmations


def _as_json(value):
    return json.loads(json.dumps(value))


def defined(record: dict) -> dict:
    """The defining fields of a parsed claim record, as :func:`claims.definition` has them."""
    return _as_json({k: record.get(k) for k in C._DEFINING})


def legacy_constant(source: str, path: str, name: str):
    """The value of ``NAME = <literal>`` in a module (or in a notebook's code cells)."""
    if path.endswith(".ipynb"):
        cells = json.loads(source)["cells"]
        source = "\n".join("".join(c["source"]) for c in cells if c["cell_type"] == "code")
    found = re.findall(rf"^\s*{re.escape(name)}\s*=\s*([^#\n]+)", source, flags=re.M)
    if not found:
        raise LookupError(f"{name} is not assigned in {path}")
    return _evaluate(ast.parse(found[0].strip(), mode="eval").body, {"__dataclasses__": {}})


def registration_mismatches(repo: Path, today: dict, confirmations: dict,
                            legacy: dict, confirmed_at) -> list[str]:
    """Every difference between what the registration commits hold and ``today``'s
    definitions (``{claim id: (definition, registered commit)}``) and confirmatory plans
    (``{claim id: plan}``, registered at ``confirmed_at(claim id)``, or at the commit
    ``confirmed_at`` for all); ``legacy``: :data:`claims.LEGACY_SOURCES`."""
    if isinstance(confirmed_at, str):
        confirmed_at = (lambda commit: lambda cid: commit)(confirmed_at)
    problems = []
    parsed: dict[str, tuple[dict, dict]] = {}

    def registry_at(commit):
        if commit not in parsed:
            parsed[commit] = registry_definitions(show(repo, commit, C.REGISTRY_PATH))
        return parsed[commit]

    for cid, (definition, commit) in today.items():
        if commit is None:
            continue
        if cid in legacy:
            path, fields = legacy[cid]
            source = show(repo, commit, path)
            params = dict(definition["parameters"])
            for fld, const in fields.items():
                want = definition["threshold"] if fld == "threshold" else params.get(fld)
                got = legacy_constant(source, path, const)
                if got != want:
                    problems.append(f"{cid}: {const} = {got!r} at {commit}:{path}, "
                                    f"but {fld} = {want!r} today")
            continue
        old = registry_at(commit)[0].get(cid)
        if old is None:
            problems.append(f"{cid}: not in {C.REGISTRY_PATH} at {commit}")
        elif defined(old) != _as_json(definition):
            diff = sorted(k for k in definition if defined(old)[k] != _as_json(definition[k]))
            problems.append(f"{cid}: {', '.join(diff)} at {commit} differ from today's")
    for cid, plan in confirmations.items():
        commit = confirmed_at(cid)
        old_claims, old_plans = registry_at(commit)
        old = old_plans.get(cid)
        if old is None:
            problems.append(f"{cid}: no confirmatory plan at {commit}")
            continue
        old = _as_json({k: v for k, v in old.items() if k != "__class__"})
        if old != _as_json(plan):
            problems.append(f"{cid}: confirmatory plan at {commit} differs from today's")
        if cid not in old_claims or defined(old_claims[cid]) != _as_json(today[cid][0]):
            problems.append(f"{cid}: its definition at the confirmation's registration "
                            f"{commit} differs from today's")
    return problems


def _today() -> tuple[dict, dict]:
    today = {c.id: (C.definition(c.id), c.registered[0] if c.registered else None)
             for c in C.CLAIMS}
    plans = {p.claim_id: {"claim_id": p.claim_id, "seeds": p.seeds,
                          "hyperparameters": p.hyperparameters, "results": p.results,
                          "tuning_seeds": p.tuning_seeds} for p in C.CONFIRMATIONS}
    return today, plans


_NO_HISTORY = history_missing()
needs_history = pytest.mark.skipif(_NO_HISTORY is not None, reason=f"needs the repository's "
                                   f"git history: {_NO_HISTORY}")


# ---- the tests ----------------------------------------------------------------------------------

@needs_history
def test_every_registration_commit_holds_todays_definition():
    today, plans = _today()
    assert registration_mismatches(REPO, today, plans, C.LEGACY_SOURCES,
                                   lambda cid: C.confirmation_registered(cid)[0]) == []


@needs_history
def test_every_registered_claim_is_checked_one_way_or_the_other():
    """A claim registered in the registry is parsed there; one registered before it has a
    legacy source. None is left unchecked."""
    first = _git(REPO, "log", "--reverse", "--format=%aI", "--", C.REGISTRY_PATH).stdout.split()
    for c in C.CLAIMS:
        if c.registered is None:
            assert c.exploratory, f"{c.id}: a confirmatory claim without a registration"
        elif c.registered[1] < first[0]:
            assert c.id in C.LEGACY_SOURCES, f"{c.id}: registered before the registry, no source"
        else:
            assert c.id not in C.LEGACY_SOURCES


@needs_history
def test_the_confirmations_were_registered_before_any_confirmatory_run():
    for plan in C.CONFIRMATIONS:
        commit, date = C.confirmation_registered(plan.claim_id)
        assert _git(REPO, "show", "-s", "--format=%aI", commit).stdout.strip() == date
        path = C.JUDGED_PATH.parent / plan.results
        log = _git(REPO, "log", "--reverse", "--format=%aI", "--",
                   f"book/data/{plan.results}").stdout.split()
        if log:
            assert log[0] > date, f"{plan.results} was committed before its registration"
        if path.exists():
            doc = json.loads(path.read_text())
            assert doc["started"]["date"] > date, f"{plan.results}: runs started first"


@needs_history
def test_first_data_and_judged_commits_changed_their_files():
    for cid, first in C.FIRST_DATA.items():
        assert _git(REPO, "show", "-s", "--format=%aI", first["commit"]).stdout.strip() == \
            first["date"], cid
        log = _git(REPO, "log", "--format=%h", "--", f"book/data/{first['file']}").stdout.split()
        assert any(h.startswith(first["commit"]) or first["commit"].startswith(h)
                   for h in log), f"{cid}: {first['commit']} did not change {first['file']}"
        earliest = _git(REPO, "log", "--reverse", "--format=%aI", "--",
                        f"book/data/{first['file']}").stdout.split()[0]
        assert earliest <= first["date"]


@needs_history
def test_recorded_registrations_and_data_commits_match_git():
    """Each recorded registration commit exists with the recorded date, and each data
    commit of the sidecar changed its file."""
    for c in C.CLAIMS:
        if c.registered is None:
            continue
        commit, date = c.registered
        out = _git(REPO, "show", "-s", "--format=%aI", commit)
        assert out.returncode == 0, f"{c.id}: commit {commit} not in the history"
        assert out.stdout.strip() == date, f"{c.id}: {commit} is dated {out.stdout.strip()}"
    for name, rec in C.JUDGED.items():
        commit, date = rec["data_commit"]
        assert _git(REPO, "show", "-s", "--format=%aI", commit).stdout.strip() == date, name
        log = _git(REPO, "log", "--format=%h", "--", f"book/data/{name}").stdout.split()
        assert any(h.startswith(commit) or commit.startswith(h) for h in log), (
            f"{name}: {commit} did not change the file")


@needs_history
def test_an_edited_threshold_fails_even_with_its_hash(monkeypatch):
    """The tamper of the audit (threshold and its stored hash edited together): the hash
    guard is satisfied, the registration in git is not."""
    entry = C.claim("rnn.race")
    monkeypatch.setitem(C._BY_ID, "rnn.race",
                        C.Claim(**{**entry.__dict__, "threshold": 0.05}))
    doc = {"claims": {"rnn.race": C.definition_hash("rnn.race")}}   # hash edited too
    assert C.judged_hashes(doc, "rnn_race.json")["rnn.race"] == C.definition_hash("rnn.race")
    today, plans = _today()
    problems = registration_mismatches(REPO, today, plans, C.LEGACY_SOURCES,
                                       lambda cid: C.confirmation_registered(cid)[0])
    assert any(p.startswith("rnn.race: THRESHOLD = 0.02") for p in problems), problems
    assert any(p.startswith("rnn.race: its definition at the confirmation") for p in problems)


@pytest.mark.skipif(shutil.which("git") is None, reason="git is not installed")
def test_a_registry_edit_is_caught_in_a_fresh_repository(tmp_path):
    """Without this repository's history: register today's ``claims.py`` in a new
    repository, then edit a threshold (and a seed plan) in the copy judged "today"."""
    source = (REPO / C.REGISTRY_PATH).read_text()
    target = tmp_path / C.REGISTRY_PATH
    target.parent.mkdir(parents=True)
    target.write_text(source)
    for args in (("init", "-q"), ("add", "."),
                 ("-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "r")):
        assert _git(tmp_path, *args).returncode == 0
    commit = _git(tmp_path, "rev-parse", "--short", "HEAD").stdout.strip()
    claims_then, plans_then = registry_definitions(source)
    assert set(claims_then) == {c.id for c in C.CLAIMS}
    assert set(plans_then) == {p.claim_id for p in C.CONFIRMATIONS}
    today = {cid: (defined(r), commit) for cid, r in claims_then.items()}
    plans = {cid: {k: v for k, v in r.items() if k != "__class__"}
             for cid, r in plans_then.items()}
    assert registration_mismatches(tmp_path, today, plans, {}, commit) == []
    edited = (source.replace('True, 0.02, "seed_plan(5, 2, first=0)"',
                             'True, 0.05, "seed_plan(5, 2, first=0)"', 1)
              .replace("CONFIRMATORY_SEEDS = (101, 102, 103, 104, 105)",
                       "CONFIRMATORY_SEEDS = (201, 202, 203, 204, 205)", 1))
    assert edited.count("0.05") > source.count("0.05")
    claims_now, plans_now = registry_definitions(edited)
    today = {cid: (defined(r), commit) for cid, r in claims_now.items()}
    plans = {cid: {k: v for k, v in r.items() if k != "__class__"}
             for cid, r in plans_now.items()}
    problems = registration_mismatches(tmp_path, today, plans, {}, commit)
    assert "rnn.race: threshold at " + commit + " differ from today's" in problems
    assert sum("confirmatory plan at" in p for p in problems) == sum(
        p.seeds == C.CONFIRMATORY_SEEDS for p in C.CONFIRMATIONS) > 0


def test_history_missing_says_why(tmp_path):
    reason = history_missing(tmp_path)
    assert reason is not None and ("git" in reason)


@pytest.mark.skipif(shutil.which("git") is None or _NO_HISTORY is not None,
                    reason="needs git and this repository's history")
def test_a_depth_one_clone_skips_with_its_reason(tmp_path):
    clone = tmp_path / "clone"
    out = subprocess.run(["git", "clone", "-q", "--depth", "1", f"file://{REPO}", str(clone)],
                         capture_output=True, text=True, timeout=120)
    assert out.returncode == 0, out.stderr
    assert history_missing(clone).startswith("shallow clone")
