"""Every stored run of the book and where it came from: the page "How these numbers were made".

Each file in ``book/data/`` was written by a package command and carries its provenance: the
command, the versions, and since issue 33 the numerics path it ran on
(:func:`~layernorm_tutorial.lab.common.numerics_paths.machine_info`). Files written before
that record less; GPU measurements record their device instead. :func:`describe` reads what a
file has, whatever its generation, and :func:`format_report` prints it within 80 columns.
"""

from __future__ import annotations

import json
import re
import textwrap
from collections.abc import Mapping
from pathlib import Path

from layernorm_tutorial.lab.common.stored_results import BOOK_DATA

__all__ = ["CHAPTERS", "describe", "describe_all", "format_report", "unlisted_files"]

#: data file name prefix -> the chapter(s) that read it.
CHAPTERS: dict[str, str] = {
    "principles_": "Principles",
    "rnn_": "RNNs",
    "residual_": "Residual connections",
    "large_models_": "Large models; Interview, advanced; Cheat sheet",
    "evidence_": "Evidence",
    "gpu_": "GPU kernel",
    "kernel_": "GPU kernel",
    "interview_": "Interview",
    "ln_vs_bn_": "LN vs BN",
}

_WIDTH = 80
_ABSOLUTE_PATH = re.compile(r"(?<![\w.])/(?:[\w.-]+/)*[\w.-]+")


def _chapter(name: str) -> str | None:
    for prefix, chapter in CHAPTERS.items():
        if name.startswith(prefix):
            return chapter
    return None


def _seconds(value) -> float | None:
    if isinstance(value, Mapping):
        parts = [v for v in value.values() if isinstance(v, (int, float))]
        return float(sum(parts)) if parts else None
    return float(value) if isinstance(value, (int, float)) else None


def _machine(doc: Mapping) -> str:
    machine = doc.get("machine")
    if isinstance(machine, Mapping):
        env = machine.get("environment") or {}
        path = ", ".join(f"{k}={v}" for k, v in env.items())
        return (f"{machine.get('cpu', '?')}, {machine.get('cpu_capability', '?')}"
                f"{', ' + path if path else ''}, {machine.get('torch_threads', '?')} "
                f"thread(s), torch {machine.get('torch', '?')}")
    device = doc.get("device") or doc.get("hardware")
    if isinstance(device, Mapping):
        device = device.get("name") or device.get("device") or json.dumps(device)[:60]
    if device:
        return f"{device} (GPU measurement)"
    versions = doc.get("versions") or {}
    torch = versions.get("torch") if isinstance(versions, Mapping) else None
    return "not recorded in the file" + (f"; torch {torch}" if torch else "")


def describe(path: str | Path) -> dict:
    """What one stored file says of itself: ``file``, ``chapter``, ``command`` (the commands
    of earlier partial runs first, where the file records them), ``machine``, ``date`` (as
    recorded, or None), ``seconds`` (summed over sections, or None)."""
    path = Path(path)
    doc = json.loads(path.read_text())
    header = doc.get("provenance") if isinstance(doc.get("provenance"), Mapping) else doc
    machine = header.get("machine") if isinstance(header.get("machine"), Mapping) else {}
    command = header.get("command") or doc.get("command")
    earlier = [run.get("command") for run in header.get("previous_runs") or []
               if isinstance(run, Mapping) and run.get("command")]
    if earlier and command:
        command = " ; then ".join([*earlier, command])
    if command:  # a scratch path of the machine that ran it says nothing to a reader
        command = _ABSOLUTE_PATH.sub("PATH", command)
    return {
        "file": path.name,
        "chapter": _chapter(path.name),
        "command": command,
        "machine": _machine({**doc, **header}),
        "date": machine.get("date") or header.get("date") or doc.get("date"),
        "seconds": _seconds(header.get("seconds", doc.get("seconds"))),
    }


def describe_all(folder: str | Path = BOOK_DATA) -> list[dict]:
    """:func:`describe` for every ``*.json`` in ``folder``, by file name."""
    return [describe(p) for p in sorted(Path(folder).glob("*.json"))]


def unlisted_files(folder: str | Path = BOOK_DATA) -> list[str]:
    """Files in ``folder`` whose chapter :data:`CHAPTERS` does not know."""
    return [p.name for p in sorted(Path(folder).glob("*.json")) if _chapter(p.name) is None]


def _field(label: str, value: str) -> str:
    return textwrap.fill(str(value), _WIDTH, initial_indent=f"  {label:8s} ",
                         subsequent_indent=" " * 11, break_on_hyphens=False)


def format_report(rows: list[dict]) -> str:
    """One block per file, every line within 80 columns."""
    blocks = []
    for row in rows:
        minutes = (f"{row['seconds'] / 60:.1f} min" if row["seconds"] is not None
                   else "not recorded")
        lines = [textwrap.fill(f"{row['file']}  ({row['chapter'] or 'no chapter'})",
                               _WIDTH, subsequent_indent="  "),
                 _field("command", row["command"] or "not recorded"),
                 _field("machine", row["machine"]),
                 _field("date", row["date"] or "not recorded"),
                 _field("run time", minutes)]
        blocks.append("\n".join(lines))
    return "\n\n".join(blocks)
