"""This machine's CPU benchmark, read with the tie rule (printed, never asserted).

A timing on the reader's machine depends on its CPU and its load; the chapter prints it as
this machine's and asserts nothing about it. :func:`comparisons` puts pairs of
implementations side by side with :func:`layernorm_tutorial.bench.compare`: a gap smaller
than the run-to-run spread of either side is a tie.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from layernorm_tutorial import bench

PAIRS = (("compiled", "composite"), ("torch", "composite"), ("compiled", "torch"))


def comparisons(report: bench.BenchReport,
                pairs: Sequence[tuple[str, str]] = PAIRS) -> list[dict]:
    """Per pair and direction: the word (faster, slower, tie), the time ratio b / a and
    the tie band (the larger spread). Pairs with a missing side are left out."""
    out = []
    for a, b in pairs:
        for direction in bench.DIRECTIONS:
            if not (_has(report, a, direction) and _has(report, b, direction)):
                continue
            v = report.compare(a, b, direction)
            out.append(dict(a=a, b=b, direction=direction, word=v["word"],
                            ratio=1.0 + v["gap"], band=v["band"]))
    return out


def _has(report: bench.BenchReport, impl: str, direction: str) -> bool:
    return any(r["implementation"] == impl and r["direction"] == direction
               for r in report.rows)


GOALS = (("compiled", "fwd", 0.9), ("compiled", "bwd", 0.8),
         ("composite", "fwd", 0.3), ("composite", "bwd", 0.3))


def goal_word(speed: float, target: float, band: float) -> str:
    """"met", "not met", or "within the spread" when ``speed`` and ``target`` differ by at
    most ``band`` (relative, the larger of the two: ``max / min - 1 <= band``)."""
    if max(speed, target) / min(speed, target) - 1.0 <= band:
        return "within the spread"
    return "met" if speed >= target else "not met"


def goal_lines(report: bench.BenchReport, goals=GOALS) -> str:
    """Each goal (implementation, direction, speed relative to torch's kernel): this
    machine's speed and the goal's word (:func:`goal_word`, with the larger run-to-run
    spread of the two rows as the band); "not measured" where a row is missing."""
    lines = []
    for impl, direction, target in goals:
        if not (_has(report, impl, direction) and _has(report, "torch", direction)):
            lines.append(f"this machine: {impl:>9} {direction} not measured (see errors)")
            continue
        ours, ref = report.row(impl, direction), report.row("torch", direction)
        speed = ref["ms"] / ours["ms"]
        word = goal_word(speed, target,
                         max(ours.get("spread", 0.0), ref.get("spread", 0.0)))
        lines.append(f"this machine: {impl:>9} {direction} at {speed:.2f}x torch's "
                     f"(goal {target}x: {word})")
    return "\n".join(lines)


def roofline_points(report: bench.BenchReport,
                    impls=("torch", "compiled", "composite")) -> list[tuple]:
    """(label, flop/byte, GFLOP/s) of each measured implementation and direction."""
    points = []
    for impl in impls:
        for direction in bench.DIRECTIONS:
            if _has(report, impl, direction):
                row = report.row(impl, direction)
                ai = bench.arithmetic_intensity(getattr(torch, row["dtype"]), direction)
                points.append((f"{impl} {direction}", ai, ai * row["gbps"]))
    return points


def format_comparisons(rows: Sequence[dict]) -> str:
    """One line per comparison, within 80 characters."""
    lines = ["this machine's run (a tie: the gap is under the run-to-run spread)"]
    for r in rows:
        lines.append(f"  {r['direction']}: {r['a']:<9} vs {r['b']:<9} {r['word']:<7}"
                     f" time ratio {r['ratio']:5.2f}x, spread up to {r['band']:.0%}")
    return "\n".join(lines)
