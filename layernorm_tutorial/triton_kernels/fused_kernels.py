"""One kernel source for LayerNorm, RMSNorm and the fused residual add + norm.

Import this module only through ``layernorm_tutorial.triton_kernels``, which decides first
whether Triton compiles for a GPU or runs in its CPU interpreter.

Compile-time variants (``tl.constexpr``), not copies:

- ``IS_RMS``: RMSNorm (no centring, ``mean = 0``, no bias) instead of LayerNorm;
- ``HAS_RESIDUAL``: the forward reads ``x`` and ``r``, writes ``s = x + r`` (rounded to the
  residual stream's dtype: the value the next block adds to) and normalizes ``s``;
  ``HAS_DRES`` in the backward adds the gradient arriving at ``s`` from the next block;
- ``HAS_WEIGHT``, ``HAS_BIAS`` (``COMPUTE_DW``, ``COMPUTE_DB`` in the backward);
- ``ROW_FITS_BLOCK``: a row (``ROWS`` rows at a time when rows are short) is held in
  registers; otherwise a row is walked in chunks of ``BLOCK_N`` (the forward: a statistics
  pass, then a normalize pass that re-reads the row from L2; the backward: ``ROWS`` rows
  at a time, a pass for c1 and c2, then a pass for dx).

Layout as in ``kernels``: the rows of ``(M, N)`` matrices with unit-stride columns, float32
statistics and accumulators whatever the input dtype.

Both kernels are *persistent*: the grid has at most a few programs per multiprocessor and each
program walks row tiles ``pid, pid + P, pid + 2P, ...`` in a ``tl.range(...,
num_stages=NUM_STAGES)`` loop, which lets Triton's software pipeliner issue the next tile's
loads while the current tile is reduced (kernel-level ``num_stages`` only pipelines loops
that feed ``tl.dot``). gamma and beta are loaded *late*, after the row's reductions, from L1
or L2: held in registers for the whole loop they would cost the occupancy they are meant
to save.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def fused_norm_fwd_kernel(
    X,  # pointer to the input rows (M, N): the branch output when HAS_RESIDUAL
    R,  # pointer to the residual rows (M, N); unused without HAS_RESIDUAL
    Y,  # pointer to the output rows (M, N), the input's dtype
    S,  # pointer to the sum rows s = x + r (M, N), written; unused without HAS_RESIDUAL
    W,  # pointer to gamma (N,); unused when HAS_WEIGHT is False
    B,  # pointer to beta (N,); unused when HAS_BIAS is False
    Mean,  # pointer to the per-row means (M,), float32; unused when IS_RMS
    Rstd,  # pointer to the per-row 1 / sqrt(var + eps) (M,), float32
    stride_x,  # elements between the starts of consecutive rows of X
    stride_r,  # ... of R
    stride_y,  # ... of Y
    stride_s,  # ... of S
    M,  # number of rows
    N,  # number of features in a row
    eps,  # added to the variance (mean square) under the square root
    IS_RMS: tl.constexpr,  # RMSNorm: mean taken as 0, no centring
    HAS_RESIDUAL: tl.constexpr,  # normalize s = x + r and store s
    HAS_WEIGHT: tl.constexpr,  # multiply by gamma
    HAS_BIAS: tl.constexpr,  # add beta
    BLOCK_N: tl.constexpr,  # lanes per row block, a power of two
    ROWS: tl.constexpr,  # rows per tile (a power of two; 1 unless rows are short)
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: rows held in registers
    NUM_STAGES: tl.constexpr,  # software-pipelining depth of the row (chunk) loops
):
    """y = (s - mean) * rstd * w + b with s = x (+ r), mean = 0 for RMSNorm; saves mean and
    rstd (float32) and, with a residual, s.

    Long rows (``ROW_FITS_BLOCK`` False) take two passes: pass 1 reads x (and r, and writes
    s) and keeps per-lane Welford statistics (count, mean, M2), merged across lanes at the
    end (Chan et al.); pass 2 re-reads the row (s or x: L2 holds it, the program wrote or
    read it moments before), normalizes and stores y."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS_BLOCK:
        col_mask = cols < N
        tiles = tl.cdiv(M, ROWS)
        for tile in tl.range(pid, tiles, programs, num_stages=NUM_STAGES):
            rows = tile * ROWS + tl.arange(0, ROWS)
            row_mask = rows < M
            mask = row_mask[:, None] & col_mask[None, :]
            rows64 = rows.to(tl.int64)  # int64: row * stride may exceed 2**31
            x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask,
                        other=0.0).to(tl.float32)
            if HAS_RESIDUAL:
                x += tl.load(R + rows64[:, None] * stride_r + cols[None, :], mask=mask,
                             other=0.0).to(tl.float32)
                s = x.to(S.dtype.element_ty, fp_downcast_rounding="rtne")  # keeps its dtype...
                tl.store(S + rows64[:, None] * stride_s + cols[None, :], s, mask=mask)
                x = s.to(tl.float32)  # ...and the norm sees exactly what was stored
            if IS_RMS:
                xc = x  # padding lanes hold 0 already
            else:
                mean = tl.sum(x, axis=1) / N
                # Padding lanes would hold 0 - mean: force them to 0 (triton #9838).
                xc = tl.where(mask, x - mean[:, None], 0.0)
            var = tl.sum(xc * xc, axis=1) / N
            rstd = 1.0 / tl.sqrt(var + eps)
            y = xc * rstd[:, None]
            # gamma and beta late: an L1 hit after the first tile, no registers held.
            if HAS_WEIGHT:
                y = y * tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            if HAS_BIAS:
                y = y + tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :]
            tl.store(Y + rows64[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty),
                     mask=mask)
            if not IS_RMS:
                tl.store(Mean + rows, mean, mask=row_mask)
            tl.store(Rstd + rows, rstd, mask=row_mask)
    else:
        for row in tl.range(pid, M, programs):
            row64 = tl.cast(row, tl.int64)
            # Pass 1: statistics (and s), one read of x and r.
            count = tl.zeros([BLOCK_N], dtype=tl.float32)
            lane_mean = tl.zeros([BLOCK_N], dtype=tl.float32)
            lane_m2 = tl.zeros([BLOCK_N], dtype=tl.float32)
            for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
                c = start + cols
                m = c < N
                x = tl.load(X + row64 * stride_x + c, mask=m, other=0.0).to(tl.float32)
                if HAS_RESIDUAL:
                    x += tl.load(R + row64 * stride_r + c, mask=m, other=0.0).to(tl.float32)
                    s = x.to(S.dtype.element_ty, fp_downcast_rounding="rtne")
                    tl.store(S + row64 * stride_s + c, s, mask=m)
                    x = s.to(tl.float32)
                if IS_RMS:
                    lane_m2 += x * x
                else:
                    # Welford per lane: every lane valid in this chunk has seen
                    # start / BLOCK_N + 1 values, so one reciprocal serves the chunk.
                    inv = 1.0 / (start // BLOCK_N + 1)
                    delta = tl.where(m, x - lane_mean, 0.0)
                    lane_mean += delta * inv
                    lane_m2 += tl.where(m, delta * (x - lane_mean), 0.0)
                    count += m.to(tl.float32)
            if IS_RMS:
                mean = 0.0
                var = tl.sum(lane_m2, axis=0) / N
            else:
                mean = tl.sum(count * lane_mean, axis=0) / N
                d = lane_mean - mean
                var = (tl.sum(lane_m2, axis=0) + tl.sum(count * d * d, axis=0)) / N
            rstd = 1.0 / tl.sqrt(var + eps)
            # Pass 2: normalize; the row comes back from L2.
            for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
                c = start + cols
                m = c < N
                if HAS_RESIDUAL:
                    x = tl.load(S + row64 * stride_s + c, mask=m, other=0.0).to(tl.float32)
                else:
                    x = tl.load(X + row64 * stride_x + c, mask=m, other=0.0).to(tl.float32)
                y = (x - mean) * rstd
                if HAS_WEIGHT:
                    y = y * tl.load(W + c, mask=m, other=0.0).to(tl.float32)
                if HAS_BIAS:
                    y = y + tl.load(B + c, mask=m, other=0.0).to(tl.float32)
                tl.store(Y + row64 * stride_y + c, y.to(Y.dtype.element_ty), mask=m)
            if not IS_RMS:
                tl.store(Mean + row64, mean)
            tl.store(Rstd + row64, rstd)


@triton.jit
def fused_norm_bwd_kernel(
    DX,  # pointer to the gradient rows of x (and of r: the same values) (M, N), written
    DY,  # pointer to the upstream gradient rows of y (M, N)
    DS,  # pointer to the upstream gradient rows of s (M, N); unused without HAS_DRES
    X,  # pointer to the normalized rows (M, N): s for the fused add, else the input
    W,  # pointer to gamma (N,); unused when HAS_WEIGHT is False
    Mean,  # pointer to the per-row means (M,), float32; unused when IS_RMS
    Rstd,  # pointer to the per-row rstd (M,), float32
    Partial,  # float32 (2, P, N): this program's partial dgamma (slab 0), dbeta (slab 1)
    stride_dx,  # elements between the starts of consecutive rows of DX
    stride_dy,  # ... of DY
    stride_ds,  # ... of DS
    stride_x,  # ... of X
    M,  # number of rows
    N,  # number of features in a row
    IS_RMS: tl.constexpr,  # RMSNorm: xhat = x * rstd, no c2 term
    HAS_DRES: tl.constexpr,  # add the gradient arriving at s
    HAS_WEIGHT: tl.constexpr,  # the forward multiplied by gamma
    COMPUTE_DW: tl.constexpr,  # write partial dgamma
    COMPUTE_DB: tl.constexpr,  # write partial dbeta
    BLOCK_N: tl.constexpr,  # lanes per row block, a power of two
    ROWS: tl.constexpr,  # rows per tile (a power of two; 1 unless rows are short)
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: rows held in registers
    NUM_STAGES: tl.constexpr,  # software-pipelining depth of the row loop
):
    """dx (= dr) for row tiles pid, pid + P, ... and this program's partial dw, db.

    With xhat = (s - mean) * rstd (mean = 0 for RMSNorm) and wdy = w * dy, per row:
        c1 = mean(xhat * wdy),  c2 = mean(wdy) (LayerNorm only, else 0),
        dx = (wdy - (xhat * c1 + c2)) * rstd  (+ ds with a residual),
        partial dw += dy * xhat,  partial db += dy   (over this program's rows).
    The dgamma/dbeta accumulators are 1-D (``BLOCK_N``): each tile's ``ROWS`` rows are summed
    into them at once, so a tile of short rows costs registers for one row of each, not
    ``ROWS``. Program ``pid`` owns row ``pid`` of each partial slab (zeros when it received no
    rows): no atomics, a fixed order of additions, deterministic. With one program per
    multiprocessor the partial slabs hold one row per SM, summed by ``fused_sum_partials``
    in one step. Long rows: ``ROWS`` rows at a time, pass 1 (c1, c2) and pass 2 (dx, the
    rows re-read from L2), the partial rows updated in place chunk by chunk, once per tile
    of ``ROWS`` rows (read-modify-write, private to the program)."""
    pid = tl.program_id(0)
    programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    PartialDW = Partial + pid.to(tl.int64) * N
    PartialDB = Partial + (programs + pid).to(tl.int64) * N
    if ROW_FITS_BLOCK:
        col_mask = cols < N
        dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        tiles = tl.cdiv(M, ROWS)
        for tile in tl.range(pid, tiles, programs, num_stages=NUM_STAGES):
            rows = tile * ROWS + tl.arange(0, ROWS)
            row_mask = rows < M
            mask = row_mask[:, None] & col_mask[None, :]
            rows64 = rows.to(tl.int64)
            rstd = tl.load(Rstd + rows, mask=row_mask, other=0.0)
            x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask,
                        other=0.0).to(tl.float32)
            dy = tl.load(DY + rows64[:, None] * stride_dy + cols[None, :], mask=mask,
                         other=0.0).to(tl.float32)
            if IS_RMS:
                xhat = x * rstd[:, None]  # padding lanes: 0
            else:
                mean = tl.load(Mean + rows, mask=row_mask, other=0.0)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
            if HAS_WEIGHT:
                wdy = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)[None, :] * dy
            else:
                wdy = dy
            c1 = tl.sum(xhat * wdy, axis=1) / N
            if IS_RMS:
                dx = (wdy - xhat * c1[:, None]) * rstd[:, None]
            else:
                c2 = tl.sum(wdy, axis=1) / N
                dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
            if HAS_DRES:
                dx += tl.load(DS + rows64[:, None] * stride_ds + cols[None, :], mask=mask,
                              other=0.0).to(tl.float32)
            tl.store(DX + rows64[:, None] * stride_dx + cols[None, :],
                     dx.to(DX.dtype.element_ty), mask=mask)
            if COMPUTE_DW:
                dw_acc += tl.sum(dy * xhat, axis=0)
            if COMPUTE_DB:
                db_acc += tl.sum(dy, axis=0)
        if COMPUTE_DW:
            tl.store(PartialDW + cols, dw_acc, mask=col_mask)
        if COMPUTE_DB:
            tl.store(PartialDB + cols, db_acc, mask=col_mask)
    else:
        for start in range(0, N, BLOCK_N):
            c = start + cols
            if COMPUTE_DW:
                tl.store(PartialDW + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
            if COMPUTE_DB:
                tl.store(PartialDB + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
        # ROWS rows at a time (a ROWS x BLOCK_N tile per chunk): the partial rows are read
        # and written once per tile, not once per row.
        tiles = tl.cdiv(M, ROWS)
        for tile in tl.range(pid, tiles, programs):
            rows = tile * ROWS + tl.arange(0, ROWS)
            row_mask = rows < M
            rows64 = rows.to(tl.int64)
            rstd = tl.load(Rstd + rows, mask=row_mask, other=0.0)
            if IS_RMS:
                mean = tl.zeros([ROWS], dtype=tl.float32)
            else:
                mean = tl.load(Mean + rows, mask=row_mask, other=0.0)
            # Pass 1: c1 and c2 need the whole row before any dx can be written.
            acc1 = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            acc2 = tl.zeros([ROWS, BLOCK_N], dtype=tl.float32)
            for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
                c = start + cols
                m = row_mask[:, None] & (c < N)[None, :]
                x = tl.load(X + rows64[:, None] * stride_x + c[None, :], mask=m,
                            other=0.0).to(tl.float32)
                dy = tl.load(DY + rows64[:, None] * stride_dy + c[None, :], mask=m,
                             other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean[:, None]) * rstd[:, None], 0.0)
                if HAS_WEIGHT:
                    dy = tl.load(W + c, mask=c < N, other=0.0).to(tl.float32)[None, :] * dy
                acc1 += xhat * dy
                if not IS_RMS:
                    acc2 += dy
            c1 = tl.sum(acc1, axis=1) / N
            c2 = tl.sum(acc2, axis=1) / N  # 0 for RMSNorm
            # Pass 2 (the rows re-read from L2): dx and the partial dw, db.
            for start in tl.range(0, N, BLOCK_N, num_stages=NUM_STAGES):
                c = start + cols
                cm = c < N
                m = row_mask[:, None] & cm[None, :]
                x = tl.load(X + rows64[:, None] * stride_x + c[None, :], mask=m,
                            other=0.0).to(tl.float32)
                dy = tl.load(DY + rows64[:, None] * stride_dy + c[None, :], mask=m,
                             other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean[:, None]) * rstd[:, None], 0.0)
                if HAS_WEIGHT:
                    wdy = tl.load(W + c, mask=cm, other=0.0).to(tl.float32)[None, :] * dy
                else:
                    wdy = dy
                dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
                if HAS_DRES:
                    dx += tl.load(DS + rows64[:, None] * stride_ds + c[None, :], mask=m,
                                  other=0.0).to(tl.float32)
                tl.store(DX + rows64[:, None] * stride_dx + c[None, :],
                         dx.to(DX.dtype.element_ty), mask=m)
                if COMPUTE_DW:
                    p = tl.load(PartialDW + c, mask=cm, other=0.0)
                    tl.store(PartialDW + c, p + tl.sum(dy * xhat, axis=0), mask=cm)
                if COMPUTE_DB:
                    p = tl.load(PartialDB + c, mask=cm, other=0.0)
                    tl.store(PartialDB + c, p + tl.sum(dy, axis=0), mask=cm)


@triton.jit
def fused_sum_partials_kernel(
    Partial,  # pointer to the float32 partial sums (2, G, N), contiguous
    OutW,  # pointer to dgamma (N,); unused when COMPUTE_DW is False
    OutB,  # pointer to dbeta (N,); unused when COMPUTE_DB is False
    G,  # partial rows per slab (<= BLOCK_G)
    N,  # number of columns
    COMPUTE_DW: tl.constexpr,  # reduce slab 0 into OutW
    COMPUTE_DB: tl.constexpr,  # reduce slab 1 into OutB
    BLOCK_G: tl.constexpr,  # next power of two >= G: every partial row loaded in one step
    BLOCK_N: tl.constexpr,  # columns per program
):
    """Column sums of both slabs in one launch and one step per program: all ``G`` partial
    rows of ``BLOCK_N`` columns are requested at once (``G * BLOCK_N * 4`` bytes in flight),
    then summed as a tree in a fixed order: deterministic."""
    pid = tl.program_id(0)
    per_slab = tl.cdiv(N, BLOCK_N)
    if COMPUTE_DW and COMPUTE_DB:
        slab = pid // per_slab
    elif COMPUTE_DW:
        slab = pid * 0
    else:
        slab = pid * 0 + 1
    cols = (pid % per_slab) * BLOCK_N + tl.arange(0, BLOCK_N)
    rows = tl.arange(0, BLOCK_G)
    mask = (rows[:, None] < G) & (cols[None, :] < N)
    base = Partial + slab.to(tl.int64) * G * N
    total = tl.sum(tl.load(base + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask,
                           other=0.0), axis=0)
    if slab == 0:
        if COMPUTE_DW:
            tl.store(OutW + cols, total.to(OutW.dtype.element_ty), mask=cols < N)
    else:
        if COMPUTE_DB:
            tl.store(OutB + cols, total.to(OutB.dtype.element_ty), mask=cols < N)
