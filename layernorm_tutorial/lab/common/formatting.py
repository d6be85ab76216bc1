"""Numbers for a notebook's stored output: round-off-sized values printed as a bound."""

from __future__ import annotations

__all__ = ["fmt"]


def fmt(value, floor: float = 1e-12, spec: str = ".1e") -> str:
    """``format(value, spec)``, or ``"< floor"`` when ``|value| < floor`` (round-off level)."""
    if hasattr(value, "detach"):
        value = value.detach()
    value = float(value)
    if abs(value) < floor:
        return f"< {floor:.0e}"
    return format(value, spec)
