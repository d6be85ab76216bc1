"""The norm placement of real models as the interview prints it, from the large-models
chapter's stored trace (``results["architectures"]``), in lines of at most 80 characters."""

from __future__ import annotations

__all__ = ["stored_large_models", "placement_summary", "placement_lines"]


def stored_large_models() -> dict:
    """The large-models chapter's stored results file (``book/data``), its shape checked:
    the provenance header and the sections ``architectures`` and ``qk_norm`` that the
    interview quotes. A missing, broken or incomplete file, or a smoke run (``--tiny``), is
    one line naming it (:class:`~layernorm_tutorial._cli.StoredFileError`)."""
    from layernorm_tutorial.lab.common.stored_results import load_results
    from layernorm_tutorial.lab.large_models.results import COMMITTED_PATH

    return load_results(COMMITTED_PATH, sections={"architectures": dict, "qk_norm": dict})


def placement_summary(entry: dict) -> dict:
    """One model's row: norm kinds, gain conventions, eps, the positions in block 0 (per
    stack: T5 has an encoder and a decoder block 0), the norms outside the blocks, and the
    default configuration's counts with ``per_block_in_d`` and ``share`` added."""
    rows = entry["rows"]
    first = [b for b in dict.fromkeys(r["block"] for r in rows) if b and b.endswith(".0")]
    full = dict(entry["default_config"])
    full["per_block_in_d"] = full["per_block"] / full["hidden_size"]
    full["share"] = full["norm_total"] / full["model_total"]
    return {"kinds": "/".join(sorted({r["kind"] for r in rows})),
            "gains": "/".join(sorted({r["gain"] for r in rows})),
            "eps": rows[0]["eps"],
            "block0": [[r["position"] for r in rows if r["block"] == b] for b in first],
            "outside": [r["position"] for r in rows if r["block"] is None],
            "default": full}


def _wrap(text: str, indent: str, width: int = 80) -> list[str]:
    lines, cur = [], indent
    for word in text.split(" "):
        if len(cur) + len(word) + 1 > width and cur.strip():
            lines.append(cur.rstrip())
            cur = indent
        cur += word + " "
    lines.append(cur.rstrip())
    return lines


def placement_lines(traced: dict, width: int = 80) -> list[str]:
    """Three to five lines per model: kinds, gain and eps; where the norms of block 0 sit;
    the default configuration's norm parameters per block (in units of D) and in total."""
    out = []
    for name, entry in traced.items():
        s = placement_summary(entry)
        full = s["default"]
        out.append(f"{name}: {s['kinds']}, gain {s['gains']}, eps {s['eps']:g}")
        where = " | ".join(", ".join(b) for b in s["block0"])
        out += _wrap(f"block 0: {where}; outside: {', '.join(s['outside'])}", "  ", width)
        out += _wrap(f"default config, D = {full['hidden_size']}, {full['layers']} blocks: "
                     f"{full['per_block_in_d']:.2f} D per block, {full['norm_total']:,} "
                     f"of {full['model_total']:,} parameters ({full['share']:.4%})",
                     "  ", width)
    return out
