"""The evidence chapter's two side experiments, run once and stored.

::

    python -m layernorm_tutorial.lab.evidence.side_experiments [--out PATH] [--force]

runs the initialization-scale sweep of :mod:`.bn_init` (3 norms x 5 scales x 5 seeds) and the
LN/BN combinations of :mod:`.combinations` (4 variants x 5 seeds), a few minutes on one
core, and writes ``book/data/evidence_side_results.json`` (an existing file is replaced only
with ``--force``). The chapter loads it with :func:`load_side_results` and re-runs a few of its
runs live; accuracies are rounded to :data:`DIGITS` significant digits.

Both experiments follow the book's verdict method (five seeds, each seed its own
train/validation split, arms paired by seed) except for tuning: their hyperparameters (SGD at
rate 0.02, Adam at 3e-3) are fixed for every arm and not tuned, so no seed is set aside.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

import numpy as np

from layernorm_tutorial._cli import (
    OutputPathError,
    StoredFileError,
    StoredFileMissing,
    check_not_a_source,
    check_output_path,
    interruptible,
    is_book_file,
    output_path,
    read_json_document,
    write_text_atomically,
)
from layernorm_tutorial.lab.evidence.bn_init import InitScaleResult, init_scale_sweep
from layernorm_tutorial.lab.evidence.combinations import CombinationResult, combination_sweep

__all__ = ["SIDE_RESULTS_PATH", "DIGITS", "run_side_experiments", "load_side_results",
           "init_scale_result", "combination_result", "main"]

SIDE_RESULTS_PATH = Path(__file__).resolve().parents[3] / "book" / "data" / \
    "evidence_side_results.json"
DIGITS = 5


def _rounded(array: np.ndarray) -> list:
    return np.vectorize(lambda v: float(f"{v:.{DIGITS}g}"))(array).tolist()


def run_side_experiments() -> dict:
    """Run both sweeps with their default settings; return the JSON-ready document."""
    start = time.perf_counter()
    init = init_scale_sweep()
    combo = combination_sweep()
    return {
        "command": "python -m layernorm_tutorial.lab.evidence.side_experiments",
        "seconds": round(time.perf_counter() - start),
        "data": "each seed its own train/validation split (load_evidence_data(seed)); the "
                "test set is the book-wide one",
        "init_scale": {"norms": list(init.norms), "scales": list(init.scales),
                       "seeds": list(init.seeds), "accuracy": _rounded(init.accuracy),
                       "settings": {"depth": 8, "width": 64, "steps": 150, "lr": 0.02,
                                    "momentum": 0.9, "batch_size": 32, "optimizer": "SGD"}},
        "combinations": {"variants": list(combo.variants), "seeds": list(combo.seeds),
                         "test_acc": _rounded(combo.test_acc),
                         "train_acc": _rounded(combo.train_acc),
                         "settings": {"steps": 200, "lr": 3e-3, "batch_size": 32,
                                      "optimizer": "Adam"}},
    }


_SECTION_KEYS = {"init_scale": ("norms", "scales", "seeds", "accuracy"),
                 "combinations": ("variants", "seeds", "test_acc", "train_acc")}


def load_side_results(path: str | Path = SIDE_RESULTS_PATH) -> dict:
    """Read the stored document, its header and both sections checked first;
    ``FileNotFoundError`` names the command that writes it, ``ValueError`` (one line naming
    the file and what to do) a file that is broken or lacks a part."""
    path = Path(path)
    command = "python -m layernorm_tutorial.lab.evidence.side_experiments"
    if not path.exists():
        raise StoredFileMissing(f"{path}: no side-experiment results; "
                                + ("restore it (git checkout) or " if is_book_file(path)
                                   else "")
                                + f"write them with `{command}`")
    doc = read_json_document(path, command=command, what="side-experiment results file",
                             required={"command": str, "init_scale": dict,
                                       "combinations": dict})
    for section, keys in _SECTION_KEYS.items():
        missing = [k for k in keys if k not in doc[section]]
        if missing:
            fix = "restore it (git checkout) or " if is_book_file(path) else ""
            raise StoredFileError(f"{path}: {section} lacks {', '.join(missing)}; "
                                  f"{fix}re-run {command}")
    return doc


def init_scale_result(doc: dict) -> InitScaleResult:
    """The stored initialization-scale sweep as an :class:`~.bn_init.InitScaleResult`."""
    d = doc["init_scale"]
    return InitScaleResult(tuple(d["norms"]), tuple(d["scales"]), tuple(d["seeds"]),
                           np.array(d["accuracy"]))


def combination_result(doc: dict) -> CombinationResult:
    """The stored combination runs as a :class:`~.combinations.CombinationResult`."""
    d = doc["combinations"]
    return CombinationResult(tuple(d["variants"]), tuple(d["seeds"]), np.array(d["test_acc"]),
                             np.array(d["train_acc"]))


@interruptible
def main(argv: list[str] | None = None) -> int:
    """Run the side experiments and write them (``--out``, default the book's file; no other
    file of the repository). A bad ``--out`` or a broken input is one line, exit status 2;
    Ctrl-C prints ``interrupted``, status 130."""
    parser = argparse.ArgumentParser(
        prog="python -m layernorm_tutorial.lab.evidence.side_experiments",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", type=output_path, default=SIDE_RESULTS_PATH,
                        help="JSON file to write")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    args = parser.parse_args(argv)
    try:
        check_not_a_source(args.out, own=(SIDE_RESULTS_PATH,))
        out = check_output_path(args.out, force=args.force)
        doc = run_side_experiments()
    except (OutputPathError, StoredFileError) as err:
        print(f"{parser.prog}: error: {err}", file=sys.stderr)
        return 2
    write_text_atomically(out, json.dumps(doc, indent=1) + "\n")
    print(f"wrote {out} ({doc['seconds']} s)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
