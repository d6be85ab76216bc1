"""``python -m layernorm_tutorial.lab.confirmatory PLAN``: run one registered confirmatory plan.

``PLAN`` is one of ``evidence-side``, ``residual``, ``principles``, ``rnn``, ``evidence``,
``large_models``, ``large_models_qk`` (:data:`~.runs.PLANS`). The runs use the fresh seeds
registered in ``lab.common.claims.CONFIRMATIONS`` and go to the plan's own file
``book/data/*_confirmatory.json``, never to the chapter's earlier results file.

Options: ``--out PATH`` (default: the plan's book file), ``--force`` to replace an existing
file (refused otherwise, before any run), ``--workers N`` single-threaded processes,
``--tiny`` a seconds-long smoke run (needs ``--out``).
"""

from __future__ import annotations

import sys

from layernorm_tutorial.lab.common.stored_results import results_command
from layernorm_tutorial.lab.confirmatory.runs import COMMAND, PLANS, plan_path, run_plan


def main(argv=None) -> None:
    argv = list(sys.argv[1:] if argv is None else argv)
    usage = f"usage: {COMMAND} PLAN [--out PATH] [--force] [--workers N] [--tiny]"
    if argv[:1] in (["-h"], ["--help"]):
        print(f"{usage}\n\n{__doc__.strip()}")
        raise SystemExit(0)
    if not argv or argv[0] not in PLANS:
        print(f"{usage}\n{COMMAND}: error: PLAN must be one of {', '.join(PLANS)}",
              file=sys.stderr)
        raise SystemExit(2)
    plan = argv.pop(0)
    results_command(argv, prog=f"{COMMAND} {plan}", description=__doc__.splitlines()[0],
                    default_out=plan_path(plan), tiny_help="a few steps per run",
                    run=lambda args: run_plan(plan, args.workers, args.tiny))


if __name__ == "__main__":
    main()
