"""Which of a chapter's verdicts are confirmatory, and which are not and why.

Issue 42 asks every chapter to print, next to its verdicts, which of them come from a
confirmatory run (fresh seeds, registered before the runs: :data:`~.claims.CONFIRMATIONS`)
and which do not, with the reason. :func:`confirmation_lines` prints that from the claims
registry (:func:`~.claims.confirmation_status`, :data:`~.claims.UNCONFIRMED`,
:func:`~.claims.confirmation_registered`) and from the chapter's confirmatory pairs (each
with its registration line, :func:`~.claims.registration_note`, which compares the
registration with the date the runs started); :func:`confirmation_glue` gives the values
the prose quotes. The pairs come from ``lab.confirmatory.verdicts`` (``*_pairs``); this
module only reads their ``claim_id``, ``registration``, ``confirmatory`` and ``mark``.
"""

from __future__ import annotations

import textwrap
from collections.abc import Sequence

from layernorm_tutorial.lab.common import claims

__all__ = ["confirmation_lines", "confirmation_glue", "seed_range", "registered_claims"]


def seed_range(seeds: Sequence[int]) -> str:
    """``101–105`` for consecutive seeds, else ``99, 100, 103``."""
    seeds = list(seeds)
    if len(seeds) > 2 and seeds == list(range(seeds[0], seeds[-1] + 1)):
        return f"{seeds[0]}–{seeds[-1]}"
    return ", ".join(map(str, seeds))


def registered_claims(chapter: str) -> dict[tuple, list[str]]:
    """The chapter's claims with a confirmatory run, grouped by what their registration
    fixed: ``{(commit, ISO date, seeds, tuning seeds, hyperparameters): [claim ids]}``."""
    groups: dict[tuple, list[str]] = {}
    for c in claims.family(chapter):
        if c.exploratory or c.id in claims.UNCONFIRMED:
            continue
        conf = claims.confirmation(c.id)
        commit, date = claims.confirmation_registered(c.id)
        key = (commit, date, tuple(conf.seeds), tuple(conf.tuning_seeds), conf.hyperparameters)
        groups.setdefault(key, []).append(c.id)
    return groups


def _wrap(text: str, width: int, indent: str = "  ") -> list[str]:
    return textwrap.wrap(text, width, initial_indent=indent,
                         subsequent_indent=indent + "    ")


def confirmation_lines(chapter: str, pairs: Sequence = (), width: int = 80) -> str:
    """What a chapter prints about its verdicts' status, within ``width`` columns:

    1. each registered claim of ``chapter``: confirmatory (and the file of its fresh runs),
       not confirmed (and why, :data:`~.claims.UNCONFIRMED`) or exploratory (post hoc);
    2. per registration: its commit and date, the fresh reported seeds, the tuning seeds
       or the hyperparameters kept;
    3. the registration line of each distinct confirmatory results file among ``pairs``
       (registered before the runs started, or not);
    4. how many of the confirmatory verdicts survive the chapter's correction, and that
       the earlier run's verdicts are printed beside them as exploratory.

    ``ValueError`` when a pair names a claim of another chapter or one without a
    confirmatory run."""
    family_ids = {c.id for c in claims.family(chapter)}
    for p in pairs:
        if p.claim_id not in family_ids:
            raise ValueError(f"pairs: claim {p.claim_id!r} is not a claim of {chapter!r}")
        claims.confirmation(p.claim_id)   # KeyError: no confirmatory run
    lines = ["which verdicts of this chapter are confirmatory (claims registry):"]
    for status in claims.confirmation_status(chapter):
        lines += _wrap(status, width)
    if any(c.exploratory for c in claims.family(chapter)):
        lines += _wrap("exploratory (post hoc): chosen after the earlier results were seen, "
                       "so no run can confirm them; printed as exploratory, outside the "
                       "family", width, indent="")
    for (commit, date, seeds, tuning, hyper), ids in registered_claims(chapter).items():
        tune = (f"hyperparameters chosen again on fresh tuning seeds {seed_range(tuning)}"
                if tuning else f"hyperparameters: {hyper}")
        lines += _wrap(f"{len(ids)} claim{'s' if len(ids) > 1 else ''} registered "
                       f"{date[:16].replace('T', ' ')} ({commit}), before the runs; fresh "
                       f"reported seeds {seed_range(seeds)} (no earlier run of the book used "
                       f"a seed above 7); {tune}", width, indent="")
    for note in dict.fromkeys(p.registration for p in pairs):
        lines += _wrap(note, width, indent="")
    if pairs:
        marked = sum(p.mark for p in pairs)
        decided = sum(p.confirmatory.decided for p in pairs)
        lines += _wrap(f"the chapter's verdicts: {len(pairs)} confirmatory, {decided} of "
                       f"them decided, {marked} marked †; beside each, the earlier run's "
                       "verdict of the same comparison, exploratory (its threshold did not "
                       "precede its first data) and outside the family", width, indent="")
    return "\n".join(lines)


def confirmation_glue(chapter: str, prefix: str = "conf") -> dict[str, str]:
    """``{prefix}-commit``, ``{prefix}-date`` (``2026-11-28``) and ``{prefix}-seeds``
    (``101–105``) of the chapter's confirmatory registration; ``ValueError`` if the
    chapter's confirmations were registered in more than one commit or on different seeds
    (the prose would need more names)."""
    groups = {(commit, date[:10], seeds)
              for commit, date, seeds, _, _ in registered_claims(chapter)}
    if len(groups) != 1:
        raise ValueError(f"chapter {chapter!r}: expected one registration of its "
                         f"confirmatory runs, found {sorted(groups)}")
    commit, date, seeds = groups.pop()
    return {f"{prefix}-commit": commit, f"{prefix}-date": date,
            f"{prefix}-seeds": seed_range(seeds)}
