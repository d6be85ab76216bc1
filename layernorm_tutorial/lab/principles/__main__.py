"""``python -m layernorm_tutorial.lab.principles``: LayerNorm against He init, judged.

Options: ``--out PATH`` (default: the book's ``book/data/principles_ln_vs_he.json``),
``--force`` to replace an existing file (without it the command refuses before any run),
``--tiny`` a seconds-long smoke run (2 layers, 1 epoch, one rate; needs ``--out``, never
writes the book's file).
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch

from layernorm_tutorial.lab.common.stored_results import output_path_from_args, save_results
from layernorm_tutorial.lab.principles import ln_vs_he


def main(argv=None) -> None:
    parser = argparse.ArgumentParser(prog=ln_vs_he.COMMAND, description=__doc__.splitlines()[0])
    parser.add_argument("--out", type=Path, default=None,
                        help=f"results JSON path (default: {ln_vs_he.COMMITTED_PATH})")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--tiny", action="store_true",
                        help="smoke run (2 layers, 1 epoch, one rate); requires --out")
    args = parser.parse_args(argv)
    if args.tiny and args.out is None:
        parser.error("--tiny needs --out: a smoke run never writes the book's results file")
    out = output_path_from_args(parser, args, ln_vs_he.COMMITTED_PATH)
    settings = dict(lr_grid=(0.02,), depth=2, epochs=1) if args.tiny else {}
    config = {"lr_grid": list(settings.get("lr_grid", ln_vs_he.LR_GRID)),
              "depth": settings.get("depth", 8), "epochs": settings.get("epochs", 15),
              "n_reported": 5, "n_tuning": 2, "first_seed": 0, "threads": 1}
    torch.set_num_threads(1)
    result, seconds = ln_vs_he.timed_comparison(**settings)
    path = save_results(ln_vs_he.build_document(result, seconds, config), out,
                        overwrite=args.force, digits=5)
    print(f"{2 * len(result['reported_seeds'])} reported and "
          f"{2 * len(result['tuning_seeds']) * len(result['lr_grid'])} tuning runs in "
          f"{seconds:.0f} s; results written to {path.resolve()}")


if __name__ == "__main__":
    main()
