"""This machine's CPU benchmark, read with the tie rule (printed, never asserted).

A timing on the reader's machine depends on its CPU and its load; the chapter prints it as
this machine's and asserts nothing about it. :func:`comparisons` puts pairs of
implementations side by side with :func:`layernorm_tutorial.bench.compare`: a gap smaller
than the run-to-run spread of either side is a tie.
"""

from __future__ import annotations

from collections.abc import Sequence

from layernorm_tutorial import bench

PAIRS = (("compiled", "composite"), ("torch", "composite"), ("compiled", "torch"))


def comparisons(report: bench.BenchReport,
                pairs: Sequence[tuple[str, str]] = PAIRS) -> list[dict]:
    """Per pair and direction: the word (faster, slower, tie), the time ratio b / a and
    the tie band (the larger spread). Pairs with a missing side are left out."""
    have = {r["implementation"] for r in report.rows}
    out = []
    for a, b in pairs:
        if a not in have or b not in have:
            continue
        for direction in bench.DIRECTIONS:
            v = report.compare(a, b, direction)
            out.append(dict(a=a, b=b, direction=direction, word=v["word"],
                            ratio=1.0 + v["gap"], band=v["band"]))
    return out


def format_comparisons(rows: Sequence[dict]) -> str:
    """One line per comparison, within 80 characters."""
    lines = ["this machine's run (a tie: the gap is under the run-to-run spread)"]
    for r in rows:
        lines.append(f"  {r['direction']}: {r['a']:<9} vs {r['b']:<9} {r['word']:<7}"
                     f" time ratio {r['ratio']:5.2f}x, spread up to {r['band']:.0%}")
    return "\n".join(lines)
