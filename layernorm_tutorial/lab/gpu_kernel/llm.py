"""The kernel an LLM runs: RMSNorm after a residual add, counted, predicted and checked.

- :func:`decoder_layer_lines`: the lines of ``transformers``' ``LlamaDecoderLayer.forward``
  where the residual is added and the next RMSNorm reads the sum (the primary source of the
  pattern the fused kernel replaces);
- :func:`bytes_table`: bytes per element, unfused and fused (``bench.bytes_per_element``);
- :func:`predict`: the time each moves at a given bandwidth, for one (M, N) input;
- :func:`check_kernels`: the package's Triton kernels against torch in float64
  (``bench.check_outputs``, the check the GPU benchmark stores), on small shapes.
"""

from __future__ import annotations

import inspect
import warnings
from collections.abc import Sequence
from dataclasses import dataclass

import torch

from layernorm_tutorial import bench

FUSED_OPS = ("rms_norm", "add_rms_norm", "add_layer_norm")
# The interpreter checks' bounds, relative to the float64 reference's largest magnitude:
# float32 as the chapter's LayerNorm checks (2e-5), bfloat16 four units of 2^-8. Tighter
# than ``bench.TOLERANCE``, which leaves room for a GPU's reductions over many rows.
CHAPTER_TOLERANCE = {torch.float32: 2e-5, torch.float16: 2e-3, torch.bfloat16: 4 * 2.0**-8}


def decoder_layer_lines() -> str:
    """The residual and norm lines of ``LlamaDecoderLayer.forward`` (transformers)."""
    with warnings.catch_warnings():  # tqdm's notebook warning names a site-packages path
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers.models.llama.modeling_llama import LlamaDecoderLayer

    src = inspect.getsource(LlamaDecoderLayer.forward).splitlines()
    keep = [line.strip() for line in src
            if "residual" in line or "layernorm" in line or "self.mlp(" in line]
    return "\n".join(keep)


def bytes_table(dtype: torch.dtype = torch.bfloat16) -> str:
    """Bytes per element of the input, forward and backward, for large M and N."""
    name = str(dtype).removeprefix("torch.")
    rows = [("LayerNorm", "layer_norm", True), ("RMSNorm", "rms_norm", True),
            ("add, then RMSNorm", "add_rms_norm", False),
            ("add + RMSNorm fused", "add_rms_norm", True)]
    lines = [f"bytes per element ({name})   forward  backward"]
    for label, op, fused in rows:
        fwd, bwd = (bench.bytes_per_element(op, dtype, d, fused=fused) for d in ("fwd", "bwd"))
        lines.append(f"{label:<27}{fwd:>8}{bwd:>10}")
    return "\n".join(lines)


@dataclass(frozen=True)
class Prediction:
    """Bytes and the time they take at ``gbps`` for one (m, n) add + RMSNorm."""

    direction: str
    unfused_bytes: int
    fused_bytes: int
    gbps: float

    @property
    def unfused_us(self) -> float:
        return self.unfused_bytes / self.gbps / 1e3

    @property
    def fused_us(self) -> float:
        return self.fused_bytes / self.gbps / 1e3

    @property
    def speedup(self) -> float:
        return self.unfused_bytes / self.fused_bytes


def predict(m: int, n: int, dtype: torch.dtype, gbps: float) -> list[Prediction]:
    """Forward and backward: the unfused pair (an add kernel moving 3 arrays, forward and
    backward, next to the RMSNorm kernel) against the fused kernel, each at ``gbps``: a
    kernel that reaches the copy bandwidth takes bytes / bandwidth."""
    if gbps <= 0:
        raise ValueError(f"gbps: expected a positive bandwidth, got {gbps}")
    size = torch.empty((), dtype=dtype).element_size()
    out = []
    for direction in bench.DIRECTIONS:
        add = 3 * m * n * size
        unfused = add + bench.bytes_moved(m, n, dtype, direction, op="rms_norm")
        fused = bench.bytes_moved(m, n, dtype, direction, op="add_rms_norm")
        out.append(Prediction(direction, unfused, fused, gbps))
    return out


def format_predictions(preds: Sequence[Prediction], m: int, n: int,
                       dtype: torch.dtype = torch.bfloat16) -> str:
    """Bytes and predicted time, unfused and fused, within 80 characters."""
    name = str(dtype).removeprefix("torch.")
    lines = [f"add + RMSNorm, {m} x {n} {name}, at {preds[0].gbps:.0f} GB/s",
             "     unfused MiB  fused MiB  unfused us  fused us  ratio"]
    for p in preds:
        lines.append(f"{p.direction:<5}{p.unfused_bytes / 2**20:11.0f}"
                     f"{p.fused_bytes / 2**20:11.0f}{p.unfused_us:12.0f}"
                     f"{p.fused_us:10.0f}{p.speedup:7.2f}x")
    return "\n".join(lines)


def check_kernels(ns: Sequence[int] = (17, 1000, 20000),
                  dtypes: Sequence[torch.dtype] = (torch.float32, torch.bfloat16),
                  ops: Sequence[str] = FUSED_OPS, m: int = 4,
                  tolerance: dict | None = None) -> list[dict]:
    """The package's Triton ``ops`` against torch in float64 (every output and gradient),
    each N and dtype; rows with the largest error, the output where it occurs, ``ok``, and
    torch's own largest error in the same dtype on the same inputs (for scale).
    ``tolerance``: dtype -> largest relative error allowed (default: ``CHAPTER_TOLERANCE``,
    the LayerNorm sections' float32 bound and four bfloat16 units)."""
    out = []
    for op in ops:
        fn, torch_fn = bench.implementation("triton", op), bench.implementation("torch", op)
        for dtype in dtypes:
            for n in ns:
                errors = bench.check_outputs(fn, op, m, n, dtype)
                worst = max(errors, key=errors.get)
                tol = (tolerance or CHAPTER_TOLERANCE).get(dtype, bench.TOLERANCE[dtype])
                torch_err = max(bench.check_outputs(torch_fn, op, m, n, dtype).values())
                out.append(dict(op=op, n=n, dtype=str(dtype).removeprefix("torch."),
                                outputs=len(errors), worst=worst, error=errors[worst],
                                torch_error=torch_err, tolerance=tol,
                                ok=errors[worst] <= tol))
    return out


def format_checks(rows: Sequence[dict]) -> str:
    """One line per case, within 80 characters."""
    lines = [f"{'op':<15}{'N':>6} {'dtype':<9}{'outputs':>3}  ours (largest, where)"
             "  torch  tolerance"]
    for r in rows:
        lines.append(f"{r['op']:<15}{r['n']:>6} {r['dtype']:<9}{r['outputs']:>3}  "
                     f"{r['error']:8.1e} ({r['worst']:<6})     {r['torch_error']:7.1e}"
                     f"  {r['tolerance']:.2g} {'ok' if r['ok'] else 'FAIL'}")
    return "\n".join(lines)


def prediction_ranges(rows: Sequence[dict], op: str = "add_rms_norm",
                      target: str = "sm_90") -> dict[str, str]:
    """From the stored predictions of ``roofline.fused_predictions``: per direction, the
    predicted fraction of the datasheet bandwidth while rows fit in registers
    ("resident") and on the chunked path ("chunks", with the first N that takes it), as
    the text the prose glues: ``{"fwd-resident": "100%", "fwd-chunks": "89%",
    "fwd-chunks-from": "32768", ...}``."""
    out: dict[str, str] = {}
    for direction in bench.DIRECTIONS:
        picked = [r for r in rows if r["op"] == op and r["target"] == target
                  and r["direction"] == direction]
        if not picked:
            raise KeyError(f"no predictions for {op} {direction} on {target}")
        for path in ("resident", "chunks"):
            fr = sorted(r["predicted_fraction"] for r in picked if r["path"] == path)
            if not fr:
                continue
            text = f"{fr[0]:.0%}" if f"{fr[0]:.0%}" == f"{fr[-1]:.0%}" else \
                f"{fr[0]:.0%} to {fr[-1]:.0%}"
            out[f"{direction}-{path}"] = text
        chunked = [r["n"] for r in picked if r["path"] == "chunks"]
        if chunked:
            out[f"{direction}-chunks-from"] = str(min(chunked))
    return out
