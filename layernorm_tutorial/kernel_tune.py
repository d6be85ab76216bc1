"""Measure on a CUDA GPU what the launch rules in ``triton_kernels.ops`` assume: memory
latency, and the time of each candidate launch configuration (correctness checked first).

Run ``python -m layernorm_tutorial.kernel_tune --out PATH`` on a machine with a GPU.
It writes one JSON file:

- ``latency_ns``: the latency of one dependent global load, from a pointer chase (one
  thread follows a random cycle through an array, each load's address read by the load
  before; time / loads), over an array far larger than L2 (``dram``) and one that fits in
  it (``l2``). This is the latency Little's law needs (``roofline``), measured without load;
- ``configs``: for M = 4096 rows and each N and dtype, the forward and backward time of every
  candidate ``(BLOCK_N, num_warps, ROWS)`` and programs per multiprocessor, its effective
  bandwidth (``roofline.ideal_bytes``), the programs per multiprocessor the compiled kernel
  allows, and its largest error against torch in float32 on fresh random inputs (outputs
  poisoned with NaN first, so an unwritten element fails).
"""

from __future__ import annotations

import argparse
import functools
import json
import sys

import torch

from ._cli import (
    BOOK_DATA,
    OutputPathError,
    check_not_a_source,
    check_output_path,
    interruptible,
    write_text_atomically,
)

M = 4096
NS = (1024, 2048, 4096, 8192, 16384)
DTYPES = {"bf16": torch.bfloat16, "fp16": torch.float16, "fp32": torch.float32}


def measure_latency_ns(nbytes: int, steps: int = 20000, seed: int = 0) -> float:
    """Nanoseconds per dependent load of a pointer chase over ``nbytes`` of int64 (a random
    single cycle, one element per 128-byte line visited). The timed chase starts where the
    warm-up chase (which compiles the kernel) did not go, so its lines are not in L2."""
    import triton
    import triton.language as tl

    @triton.jit
    def chase(P, Out, start, steps):
        idx = tl.load(P + start)  # int64 from here on
        for _ in range(steps - 1):
            idx = tl.load(P + idx)
        tl.store(Out, idx)

    lines = nbytes // 128
    g = torch.Generator().manual_seed(seed)
    order = torch.randperm(lines, generator=g) * 16  # element index of each visited line
    nxt = torch.empty(lines * 16, dtype=torch.int64)
    nxt[order] = torch.roll(order, -1)
    p, out = nxt.cuda(), torch.empty(1, dtype=torch.int64, device="cuda")
    chase[(1,)](p, out, int(order[0]), 64, num_warps=1)
    torch.cuda.synchronize()
    start, end = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
    begin = int(order[lines // 2]) if nbytes > 2**28 else int(order[0])  # L2 case: warm
    if nbytes <= 2**28:
        chase[(1,)](p, out, begin, steps, num_warps=1)
    start.record()
    chase[(1,)](p, out, begin, steps, num_warps=1)
    end.record()
    torch.cuda.synchronize()
    return start.elapsed_time(end) * 1e6 / steps


def _ops():
    """``triton_kernels.ops``, imported when first needed: this module imports without
    Triton (macOS, Windows), and a GPU measurement needs it anyway."""
    from .triton_kernels import ops

    return ops


def _candidates(n: int, kernel: str) -> list[tuple]:
    """``(config, per_sm)`` pairs to try: the rule's own first, then other warp counts (and,
    in the backward, programs per multiprocessor), then other row counts for short rows."""
    ops = _ops()
    cap = ops.MAX_BLOCK_N if kernel == "forward" else ops.MAX_BLOCK_N_BACKWARD
    block_n, warps, rows, split, fits = ops.launch_config(n, cap, kernel, 2)
    default_per_sm = ops.BACKWARD_PROGRAMS_PER_SM if kernel == "backward" else None
    out = [((block_n, warps, rows, split, fits), default_per_sm)]
    per_sm_options = (1, 2, 4) if kernel == "backward" else (None,)
    for w in (4, 8, 16):
        for p in per_sm_options:
            out.append(((block_n, w, rows, split, fits), p))
    if fits and n <= 2048:
        for r in (max(rows // 2, 1), 2 * rows):
            out.append(((block_n, warps, r, split, fits), default_per_sm))
    if kernel == "backward" and n > 8192:  # long rows: one program, or chunks
        out += [((16384, 16, 1, 1, n <= 16384), 1), ((8192, 16, 1, 1, False), 1)]
    return list(dict.fromkeys(out))


def _time(fn) -> float:
    from triton.testing import do_bench

    return do_bench(fn, warmup=10, rep=40, return_mode="median") * 1e-3


def _time_graph(fn) -> float:
    from triton.testing import do_bench_cudagraph

    return do_bench_cudagraph(fn, rep=40, return_mode="median") * 1e-3


def sweep(ns=NS, dtypes=("bf16", "fp32"), progress=None) -> list[dict]:
    """Time and check every candidate configuration (see the module docstring)."""
    from .roofline import ideal_bytes

    ops = _ops()
    results = []
    say = progress or (lambda _m: None)
    for n in ns:
        for name in dtypes:
            dtype = DTYPES[name]
            g = torch.Generator(device="cuda").manual_seed(n)
            x = torch.randn(M, n, device="cuda", generator=g).to(dtype) * 2 + 3
            w = (torch.randn(n, device="cuda", generator=g) * 0.5 + 1).to(dtype)
            b = torch.randn(n, device="cuda", generator=g).to(dtype)
            dy = torch.randn(M, n, device="cuda", generator=g).to(dtype)
            ref = torch.nn.functional.layer_norm(x.float(), (n,), w.float(), b.float())
            _, mean, rstd = ops.layer_norm_forward(x, w, b)
            xr = x.float().requires_grad_()
            wr, br = w.float().requires_grad_(), b.float().requires_grad_()
            grads_ref = torch.autograd.grad(
                torch.nn.functional.layer_norm(xr, (n,), wr, br), (xr, wr, br), dy.float())
            for kernel in ("forward", "backward"):
                nbytes = ideal_bytes(M, n, dtype.itemsize, "fwd" if kernel == "forward" else "bwd")
                for config, per_sm in _candidates(n, kernel):
                    row = dict(kernel=kernel, n=n, dtype=name, block_n=config[0],
                               num_warps=config[1], rows=config[2], split=config[3],
                               row_fits_block=config[4], per_sm=per_sm)
                    try:
                        if kernel == "forward":
                            y = torch.full_like(x, float("nan"))
                            mu = torch.empty(M, device="cuda")
                            rs = torch.empty(M, device="cuda")
                            fn = functools.partial(ops.layer_norm_forward, x, w, b, out=y,
                                                   mean=mu, rstd=rs, config=config)
                            fn()
                            err = (y.float() - ref).abs().max().item()
                        else:
                            dx = torch.full_like(x, float("nan"))
                            fn = functools.partial(ops.layer_norm_backward, dy, x, w, mean,
                                                   rstd, dx=dx, config=config, per_sm=per_sm)
                            outs = fn()
                            err = max((a.float() - r).abs().max().item() / max(
                                1.0, r.abs().max().item()) for a, r in
                                zip(outs, grads_ref, strict=True))
                            resident = _resident(dy, x, w, mean, rstd, dx, config)
                            row["programs"] = config[3] * ops.backward_programs(
                                M, config[2] if config[4] else 1, x.device, resident, per_sm,
                                config[3])
                            row["resident_per_sm"] = resident
                        row["max_error"] = err
                        seconds, replay = _time(fn), _time_graph(fn)
                        row.update(ms=seconds * 1e3, gbps=nbytes / seconds / 1e9,
                                   graph_ms=replay * 1e3, graph_gbps=nbytes / replay / 1e9)
                    except Exception as exc:  # a candidate that fails is recorded, not hidden
                        row["error"] = f"{type(exc).__name__}: {exc}"[:300]
                    results.append(row)
                    say(json.dumps(row))
    return results


def _resident(dy, x, w, mean, rstd, dx, config) -> int:
    ops = _ops()
    block_n, warps, rows, split, fits = config
    n = x.shape[1]
    constants = dict(HAS_WEIGHT=True, COMPUTE_DW=True, COMPUTE_DB=True, BLOCK_N=block_n,
                     ROWS=rows if fits else 1, SPLIT=split if fits else 1, ROW_FITS_BLOCK=fits)
    probe = torch.empty((2, 1, n), dtype=torch.float32, device=x.device)
    return ops.resident_programs(ops.layer_norm_bwd_kernel,
                                 (dx, dy, x, w, mean, rstd, probe, x.stride(0), dy.stride(0),
                                  dx.stride(0), x.shape[0], n), constants, warps, x.device)


@interruptible
def main(argv=None) -> int:
    parser = argparse.ArgumentParser(prog="python -m layernorm_tutorial.kernel_tune",
                                     description=__doc__.split("\n\n")[0])
    parser.add_argument("--out", required=True, help="JSON file to write")
    parser.add_argument("--force", action="store_true", help="replace an existing file")
    parser.add_argument("--dtypes", default="bf16,fp32", help="comma-separated: bf16,fp16,fp32")
    args = parser.parse_args(argv)
    try:  # never another of the repository's files, --force or not
        check_not_a_source(args.out, own=(BOOK_DATA / "gpu_tune_h100.json",))
        out = check_output_path(args.out, force=args.force)
    except OutputPathError as err:
        parser.error(str(err))
    if not torch.cuda.is_available():
        parser.error("a CUDA GPU is needed: torch.cuda.is_available() is False")
    dtypes = tuple(args.dtypes.split(","))
    if not set(dtypes) <= set(DTYPES):
        parser.error(f"--dtypes: expected names among {sorted(DTYPES)}, got {args.dtypes}")
    ops = _ops()
    latency = {"dram": measure_latency_ns(2**30), "l2": measure_latency_ns(8 * 2**20)}
    print(f"latency of one dependent load: {latency}", flush=True)
    configs = sweep(dtypes=dtypes, progress=lambda m: print(m, file=sys.stderr, flush=True))
    write_text_atomically(out, json.dumps(dict(
        device=torch.cuda.get_device_name(), latency_ns=latency,
        limits=ops.device_limits(torch.device("cuda")), m=M, configs=configs), indent=1)
        + "\n")
    best = {}
    for r in configs:
        if "graph_gbps" in r:
            key = (r["kernel"], r["n"], r["dtype"])
            if key not in best or r["graph_gbps"] > best[key]["graph_gbps"]:
                best[key] = r
    for (kernel, n, dtype), r in sorted(best.items()):
        first = next(c for c in configs if (c["kernel"], c["n"], c["dtype"]) == (kernel, n, dtype))
        print(f"{kernel:<9}{n:>6} {dtype:<5} rule {first.get('graph_gbps', 0):6.0f} best "
              f"{r['graph_gbps']:6.0f} GB/s (graph; eager {r['gbps']:5.0f}) BLOCK_N="
              f"{r['block_n']} warps={r['num_warps']} rows={r['rows']} per_sm={r['per_sm']} "
              f"err={r['max_error']:.1e}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
