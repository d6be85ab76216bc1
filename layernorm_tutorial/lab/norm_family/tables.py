"""The norm-family chapter's printed tables, within the HTML's 80 columns."""

from __future__ import annotations

from layernorm_tutorial import axes

__all__ = ["family_table_text"]


def family_table_text(shape, layout: str, num_groups: int) -> str:
    """``axes.family_table`` as text: per member the reduced axes, the statistics' shape,
    the elements behind each statistic, the parameters' shape and whether it keeps running
    statistics. Every line is at most 80 characters for the chapter's shapes."""
    lines = [f"input {layout} {tuple(shape)}:",
             f"  {'member':<14}{'reduces over':<18}{'stats shape':<13}{'per stat':>9}  "
             f"{'param shape':<14}running"]
    for row in axes.family_table(shape, layout, num_groups=num_groups):
        lines.append(f"  {row['member']:<14}{row['reduces over']:<18}"
                     f"{str(row['statistics shape']):<13}"
                     f"{row['elements per statistic']:>9}  "
                     f"{str(row['parameter shape']):<14}{row['running statistics']}")
    return "\n".join(lines)
