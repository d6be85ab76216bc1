"""The Triton kernels of the fused LayerNorm: one forward, one backward, one column reduction.

Import this module only through ``layernorm_tutorial.triton_kernels``, which decides first
whether Triton compiles for a GPU or runs in its CPU interpreter.

Layout: the input is viewed as a matrix ``X`` of shape ``(M, N)``; row ``i`` is one sample's
``N = prod(normalized_shape)`` features, with elements ``X[i * stride + j]`` (the last
dimension is contiguous). A program handles whole rows, ``ROWS`` of them at a time (a
``(ROWS, BLOCK_N)`` tile: several short rows per step keep enough bytes in flight).
``BLOCK_N`` is a power of two (Triton blocks must be); when ``N < BLOCK_N`` the lanes
``j >= N`` are padding and every reduction must ignore them. When ``N > BLOCK_N``
(``ROW_FITS_BLOCK`` False) a row is walked in ``ceil(N / BLOCK_N)`` chunks, one row at a time.

All statistics and reductions are accumulated in float32 whatever the input dtype.
"""

from __future__ import annotations

import triton
import triton.language as tl


@triton.jit
def layer_norm_fwd_kernel(
    X,  # pointer to the input rows (M, N), any of fp32/fp16/bf16
    Y,  # pointer to the output rows (M, N), the input's dtype
    W,  # pointer to gamma (N,); unused when HAS_WEIGHT is False
    B,  # pointer to beta (N,); unused when HAS_BIAS is False
    Mean,  # pointer to the per-row means (M,), float32, written here
    Rstd,  # pointer to the per-row 1 / sqrt(var + eps) (M,), float32, written here
    stride_x,  # elements between the starts of consecutive rows of X
    stride_y,  # elements between the starts of consecutive rows of Y
    M,  # number of rows
    N,  # number of features in a row
    eps,  # added to the variance under the square root
    HAS_WEIGHT: tl.constexpr,  # multiply by gamma
    HAS_BIAS: tl.constexpr,  # add beta
    BLOCK_N: tl.constexpr,  # lanes per row block, a power of two
    ROWS: tl.constexpr,  # rows per program (a power of two; 1 unless rows are short)
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: the rows are held in registers
):
    """y = (x - mean) * rstd * w + b for rows ROWS*pid ... ROWS*pid + ROWS - 1; saves mean
    and rstd (float32)."""
    pid = tl.program_id(0)
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS_BLOCK:
        rows = pid * ROWS + tl.arange(0, ROWS)
        row_mask = rows < M
        col_mask = cols < N
        mask = row_mask[:, None] & col_mask[None, :]
        # gamma and beta first: their loads overlap the row's instead of waiting behind the
        # two reductions (a serialized round trip to L2 at the end).
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            b = tl.load(B + cols, mask=col_mask, other=0.0).to(tl.float32)
        rows64 = rows.to(tl.int64)  # int64: row * stride may exceed 2**31
        x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask,
                    other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=1) / N  # padding lanes hold 0: they do not change the sum
        # Padding lanes would hold 0 - mean: force them to 0 before squaring (triton #9838).
        xc = tl.where(mask, x - mean[:, None], 0.0)
        var = tl.sum(xc * xc, axis=1) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd[:, None]
        if HAS_WEIGHT:
            y = y * w[None, :]
        if HAS_BIAS:
            y = y + b[None, :]
        tl.store(Y + rows64[:, None] * stride_y + cols[None, :], y.to(Y.dtype.element_ty),
                 mask=mask)
        tl.store(Mean + rows, mean, mask=row_mask)
        tl.store(Rstd + rows, rstd, mask=row_mask)
    else:
        row = pid.to(tl.int64)
        X += row * stride_x
        Y += row * stride_y
        # Pass 1: the mean, chunk by chunk (per-lane partial sums, one tree sum at the end).
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            acc += tl.load(X + c, mask=c < N, other=0.0).to(tl.float32)
        mean = tl.sum(acc, axis=0) / N
        # Pass 2: the variance about that mean (two-pass: no E[x^2] - E[x]^2 cancellation).
        acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for start in range(0, N, BLOCK_N):
            c = start + cols
            x = tl.load(X + c, mask=c < N, other=0.0).to(tl.float32)
            xc = tl.where(c < N, x - mean, 0.0)
            acc += xc * xc
        var = tl.sum(acc, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        # Pass 3: normalize, scale, shift, store.
        for start in range(0, N, BLOCK_N):
            c = start + cols
            m = c < N
            if HAS_WEIGHT:
                w = tl.load(W + c, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                b = tl.load(B + c, mask=m, other=0.0).to(tl.float32)
            x = tl.load(X + c, mask=m, other=0.0).to(tl.float32)
            y = (x - mean) * rstd
            if HAS_WEIGHT:
                y = y * w
            if HAS_BIAS:
                y = y + b
            tl.store(Y + c, y.to(Y.dtype.element_ty), mask=m)
        tl.store(Mean + row, mean)
        tl.store(Rstd + row, rstd)


@triton.jit
def _xhat_dy_wdy(
    X_row,  # pointer to the first element of one input row
    DY_row,  # pointer to the first element of the same row of the upstream gradient
    W,  # pointer to gamma (N,); unused when HAS_WEIGHT is False
    mean,  # the row's mean (float32 scalar)
    rstd,  # the row's 1 / sqrt(var + eps) (float32 scalar)
    c,  # the columns of this chunk (a block of indices)
    m,  # c < N: which lanes hold features
    HAS_WEIGHT: tl.constexpr,  # the forward multiplied by gamma
):
    """One chunk of a row, in float32: xhat = (x - mean) * rstd, dy, and wdy = gamma * dy.

    Lanes outside the row (``m`` False) are 0 in all three."""
    x = tl.load(X_row + c, mask=m, other=0.0).to(tl.float32)
    dy = tl.load(DY_row + c, mask=m, other=0.0).to(tl.float32)
    xhat = tl.where(m, (x - mean) * rstd, 0.0)
    if HAS_WEIGHT:
        wdy = tl.load(W + c, mask=m, other=0.0).to(tl.float32) * dy
    else:
        wdy = dy
    return xhat, dy, wdy


@triton.jit
def layer_norm_bwd_kernel(
    DX,  # pointer to the input gradient rows (M, N), written here
    DY,  # pointer to the upstream gradient rows (M, N)
    X,  # pointer to the input rows (M, N)
    W,  # pointer to gamma (N,); unused when HAS_WEIGHT is False
    Mean,  # pointer to the per-row means saved by the forward (M,), float32
    Rstd,  # pointer to the per-row rstd saved by the forward (M,), float32
    Partial,  # float32 (2, groups, N): partial dgamma (slab 0) and dbeta (slab 1)
    stride_x,  # elements between the starts of consecutive rows of X
    stride_dy,  # ... of DY
    stride_dx,  # ... of DX
    M,  # number of rows
    N,  # number of features in a row
    HAS_WEIGHT: tl.constexpr,  # the forward multiplied by gamma
    COMPUTE_DW: tl.constexpr,  # write partial dgamma
    COMPUTE_DB: tl.constexpr,  # write partial dbeta
    BLOCK_N: tl.constexpr,  # lanes per row block, a power of two
    ROWS: tl.constexpr,  # rows per step (a power of two; 1 unless rows are short)
    SPLIT: tl.constexpr,  # programs sharing each row's columns (1; 2 or 4 for the longest)
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: the rows are held in registers
):
    """dx for row blocks g, g + G, g + 2G, ... of group g and this program's partial dw, db.

    With xhat = (x - mean) * rstd and wdy = w * dy (elementwise, one row):
        c1 = mean(xhat * wdy),  c2 = mean(wdy),  dx = (wdy - (xhat * c1 + c2)) * rstd
        partial dw += dy * xhat,  partial db += dy      (summed over the group's rows)
    The ``P`` programs form ``G = P / SPLIT`` groups of ``SPLIT`` programs; program ``pid``
    is part ``pid % SPLIT`` of group ``pid // SPLIT``. With ``SPLIT = 1`` a program holds
    its rows and both accumulators in registers. With ``SPLIT`` of 2 or 4 (rows too long for a
    row and two row-sized accumulators in one program's registers) both programs of a group
    read the whole row for c1 and c2, then each reloads its half of the columns (from L1 or
    L2: its partner read the same row at about the same time), writes that half of dx and
    accumulates dw, db for that half only. Group ``g`` owns row ``g`` of each partial slab
    and its parts write disjoint columns of it (zeros when the group received no rows): no
    atomics, no locks, and the order of every floating-point addition is fixed. gamma is
    reloaded at every step (an L1 or L2 hit) instead of held in registers for the whole
    loop: the registers it would take decide whether two programs fit on a multiprocessor.
    """
    pid = tl.program_id(0)
    groups = tl.num_programs(0) // SPLIT
    group = pid // SPLIT
    cols = tl.arange(0, BLOCK_N)
    PartialDW = Partial + group.to(tl.int64) * N
    PartialDB = Partial + (groups + group).to(tl.int64) * N
    if ROW_FITS_BLOCK:
        PART_N: tl.constexpr = BLOCK_N // SPLIT
        col_mask = cols < N  # (SPLIT = 1)
        pcols = (pid % SPLIT) * PART_N + tl.arange(0, PART_N)  # this program's columns
        pcol_mask = pcols < N
        dw_acc = tl.zeros([ROWS, PART_N], dtype=tl.float32)
        db_acc = tl.zeros([ROWS, PART_N], dtype=tl.float32)
        for block in range(group, tl.cdiv(M, ROWS), groups):
            rows = block * ROWS + tl.arange(0, ROWS)
            row_mask = rows < M
            mask = row_mask[:, None] & col_mask[None, :]  # (SPLIT = 1)
            rows64 = rows.to(tl.int64)
            mean = tl.load(Mean + rows, mask=row_mask, other=0.0)
            rstd = tl.load(Rstd + rows, mask=row_mask, other=0.0)
            if SPLIT == 1:
                x = tl.load(X + rows64[:, None] * stride_x + cols[None, :], mask=mask,
                            other=0.0).to(tl.float32)
                dy = tl.load(DY + rows64[:, None] * stride_dy + cols[None, :], mask=mask,
                             other=0.0).to(tl.float32)
                xhat = tl.where(mask, (x - mean[:, None]) * rstd[:, None], 0.0)
                if HAS_WEIGHT:
                    w = tl.load(W + cols, mask=col_mask, other=0.0).to(tl.float32)
                    wdy = w[None, :] * dy
                else:
                    wdy = dy
                c1 = tl.sum(xhat * wdy, axis=1) / N
                c2 = tl.sum(wdy, axis=1) / N
                pmask = mask
            else:
                # c1 and c2 over the whole row, one part at a time (a part's registers are
                # reused for the next), then this program's part again, from the caches.
                s1 = tl.zeros([ROWS], dtype=tl.float32)
                s2 = tl.zeros([ROWS], dtype=tl.float32)
                for part in tl.static_range(SPLIT):
                    c = part * PART_N + tl.arange(0, PART_N)
                    m = row_mask[:, None] & (c < N)[None, :]
                    x = tl.load(X + rows64[:, None] * stride_x + c[None, :], mask=m,
                                other=0.0).to(tl.float32)
                    dy = tl.load(DY + rows64[:, None] * stride_dy + c[None, :], mask=m,
                                 other=0.0).to(tl.float32)
                    xhat = tl.where(m, (x - mean[:, None]) * rstd[:, None], 0.0)
                    if HAS_WEIGHT:
                        dy = tl.load(W + c, mask=c < N, other=0.0).to(tl.float32)[None, :] * dy
                    s1 += tl.sum(xhat * dy, axis=1)
                    s2 += tl.sum(dy, axis=1)
                c1 = s1 / N
                c2 = s2 / N
                pmask = row_mask[:, None] & pcol_mask[None, :]
                dy = tl.load(DY + rows64[:, None] * stride_dy + pcols[None, :], mask=pmask,
                             other=0.0).to(tl.float32)
                x = tl.load(X + rows64[:, None] * stride_x + pcols[None, :], mask=pmask,
                            other=0.0).to(tl.float32)
                xhat = tl.where(pmask, (x - mean[:, None]) * rstd[:, None], 0.0)
                if HAS_WEIGHT:
                    w = tl.load(W + pcols, mask=pcol_mask, other=0.0).to(tl.float32)
                    wdy = w[None, :] * dy
                else:
                    wdy = dy
            dx = (wdy - (xhat * c1[:, None] + c2[:, None])) * rstd[:, None]
            tl.store(DX + rows64[:, None] * stride_dx + pcols[None, :],
                     dx.to(DX.dtype.element_ty), mask=pmask)
            if COMPUTE_DW:
                dw_acc += dy * xhat
            if COMPUTE_DB:
                db_acc += dy
        if COMPUTE_DW:
            tl.store(PartialDW + pcols, tl.sum(dw_acc, axis=0), mask=pcol_mask)
        if COMPUTE_DB:
            tl.store(PartialDB + pcols, tl.sum(db_acc, axis=0), mask=pcol_mask)
    else:
        # Long rows: the partial sums live in this program's row of the float32 slabs
        # (read-modify-write, private to this program), which is zeroed first.
        for start in range(0, N, BLOCK_N):
            c = start + cols
            if COMPUTE_DW:
                tl.store(PartialDW + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
            if COMPUTE_DB:
                tl.store(PartialDB + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
        for row in range(group, M, groups):  # SPLIT is 1 on this path
            row64 = tl.cast(row, tl.int64)
            mean = tl.load(Mean + row64)
            rstd = tl.load(Rstd + row64)
            # Pass 1: c1 and c2 need the whole row before any dx can be written.
            sum_xhat_wdy = tl.zeros([BLOCK_N], dtype=tl.float32)
            sum_wdy = tl.zeros([BLOCK_N], dtype=tl.float32)
            for start in range(0, N, BLOCK_N):
                c = start + cols
                m = c < N
                xhat, dy, wdy = _xhat_dy_wdy(X + row64 * stride_x, DY + row64 * stride_dy, W,
                                             mean, rstd, c, m, HAS_WEIGHT)
                sum_xhat_wdy += xhat * wdy
                sum_wdy += wdy
            c1 = tl.sum(sum_xhat_wdy, axis=0) / N
            c2 = tl.sum(sum_wdy, axis=0) / N
            # Pass 2 (the row is re-read, mostly from L2): dx, and this row's contribution
            # to the partial dw, db.
            for start in range(0, N, BLOCK_N):
                c = start + cols
                m = c < N
                xhat, dy, wdy = _xhat_dy_wdy(X + row64 * stride_x, DY + row64 * stride_dy, W,
                                             mean, rstd, c, m, HAS_WEIGHT)
                dx = (wdy - (xhat * c1 + c2)) * rstd
                tl.store(DX + row64 * stride_dx + c, dx.to(DX.dtype.element_ty), mask=m)
                if COMPUTE_DW:
                    p = tl.load(PartialDW + c, mask=m, other=0.0)
                    tl.store(PartialDW + c, p + dy * xhat, mask=m)
                if COMPUTE_DB:
                    p = tl.load(PartialDB + c, mask=m, other=0.0)
                    tl.store(PartialDB + c, p + dy, mask=m)


@triton.jit
def sum_partials_kernel(
    Partial,  # pointer to the float32 partial sums (2, G, N), contiguous
    OutW,  # pointer to dgamma (N,), the weight's dtype; unused when COMPUTE_DW is False
    OutB,  # pointer to dbeta (N,), the bias's dtype; unused when COMPUTE_DB is False
    G,  # number of partial rows per slab
    N,  # number of columns
    COMPUTE_DW: tl.constexpr,  # reduce slab 0 into OutW
    COMPUTE_DB: tl.constexpr,  # reduce slab 1 into OutB
    BLOCK_G: tl.constexpr,  # partial rows added per step
    BLOCK_N: tl.constexpr,  # columns per program
):
    """Column sums of both slabs in one launch: programs ``0 .. cdiv(N, BLOCK_N) - 1`` sum
    slab 0 into dgamma, the next as many slab 1 into dbeta (when only one is asked for, all
    programs work on it). Every column is summed in the same fixed order: deterministic."""
    pid = tl.program_id(0)
    per_slab = tl.cdiv(N, BLOCK_N)
    if COMPUTE_DW and COMPUTE_DB:
        slab = pid // per_slab
    elif COMPUTE_DW:
        slab = pid * 0
    else:
        slab = pid * 0 + 1
    cols = (pid % per_slab) * BLOCK_N + tl.arange(0, BLOCK_N)
    base = Partial + slab.to(tl.int64) * G * N
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & (cols[None, :] < N)
        acc += tl.load(base + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask,
                       other=0.0)
    total = tl.sum(acc, axis=0)
    if slab == 0:
        if COMPUTE_DW:
            tl.store(OutW + cols, total.to(OutW.dtype.element_ty), mask=cols < N)
    else:
        if COMPUTE_DB:
            tl.store(OutB + cols, total.to(OutB.dtype.element_ty), mask=cols < N)
