"""Sphinx extension: the book built from the outputs stored in the notebooks.

The book is built with ``execute_notebooks: "off"`` (``_config.yml``): every page shows the
outputs stored in its notebook, which ``pytest`` (nbval) compares with a fresh execution.
This extension makes that build as informative and as safe as an executing one:

- the ``{nb-exec-table}`` of the execution-times page lists each notebook with the run that
  produced its stored outputs, read from the timings Jupyter stores in every executed cell
  (``metadata.execution``): when it finished, how long it took (first cell started to last
  cell finished), method ``stored``, and whether a cell raised;
- a notebook with a code cell that was never executed (no execution count: its outputs are
  missing, not empty) gets a warning, which fails the strict build (``-W``).

With execution switched on (``book_build --execute``) the extension does nothing.
"""

from __future__ import annotations

import json
from datetime import datetime
from pathlib import Path

from sphinx.util import logging

LOGGER = logging.getLogger(__name__)


def _timestamp(text: str | None) -> float | None:
    if not text:
        return None
    try:
        return datetime.fromisoformat(text.replace("Z", "+00:00")).timestamp()
    except ValueError:
        return None


def stored_run(notebook: dict) -> dict:
    """The run that produced a notebook's stored outputs, in myst-nb's ``exec_data`` form
    (``mtime``, ``runtime``, ``method``, ``succeeded``, ``error``, ``traceback``), from
    the ``metadata.execution`` timings of its code cells; ``mtime``/``runtime`` are None
    when the cells carry no timings. Also ``never_executed``: the indices of the code cells
    without an execution count."""
    code = [(i, c) for i, c in enumerate(notebook.get("cells", []))
            if c.get("cell_type") == "code"]
    starts, ends, errors, never = [], [], [], []
    for index, cell in code:
        if not "".join(cell.get("source", "")).strip():
            continue  # an empty cell is not run
        if cell.get("execution_count") is None:
            never.append(index)
        timing = cell.get("metadata", {}).get("execution", {})
        start = _timestamp(timing.get("iopub.execute_input"))
        end = _timestamp(timing.get("shell.execute_reply"))
        if start is not None:
            starts.append(start)
        if end is not None:
            ends.append(end)
        errors += [o for o in cell.get("outputs", []) if o.get("output_type") == "error"]
    first = min(starts) if starts else None
    last = max(ends) if ends else None
    error = f"{errors[0].get('ename')}: {errors[0].get('evalue')}" if errors else None
    return {
        "mtime": last,
        "runtime": (last - first) if first is not None and last is not None else None,
        "method": "stored",
        "succeeded": not errors and not never,
        "error": error,
        "traceback": None,
        "never_executed": never,
    }


def record_stored_run(app, doctree) -> None:
    """``doctree-read``: give a notebook read without execution its stored run's data."""
    from myst_nb.sphinx_ import NbMetadataCollector

    if app.config.nb_execution_mode != "off":
        return
    env = app.env
    source = Path(env.doc2path(env.docname))
    if source.suffix != ".ipynb" or NbMetadataCollector.get_exec_data(env, env.docname):
        return
    run = stored_run(json.loads(source.read_text(encoding="utf8")))
    never = run.pop("never_executed")
    if never:
        LOGGER.warning(
            f"{len(never)} code cell(s) never executed (cells {never[:5]}): the book shows "
            "stored outputs; execute the notebook (`jupyter nbconvert --to notebook "
            "--execute --inplace`) and check it with `pytest`",
            location=env.docname, type="layernorm", subtype="stored_outputs")
    NbMetadataCollector.set_exec_data(env, env.docname, run)


def setup(app):
    app.setup_extension("myst_nb")
    app.connect("doctree-read", record_stored_run)
    return {"parallel_read_safe": True, "parallel_write_safe": True}
