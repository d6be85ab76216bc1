"""The Triton kernels of the fused LayerNorm: one forward, one backward, one column reduction.

Import this module only through ``layernorm_tutorial.triton_kernels``, which decides first
whether Triton compiles for a GPU or runs in its CPU interpreter.

Layout: the input is viewed as a matrix ``X`` of shape ``(M, N)``; row ``i`` is one sample's
``N = prod(normalized_shape)`` features, with elements ``X[i * stride + j]`` (the last
dimension is contiguous). A program handles whole rows. ``BLOCK_N`` is a power of two (Triton
blocks must be); when ``N < BLOCK_N`` the lanes ``j >= N`` are padding and every reduction
must ignore them. When ``N > BLOCK_N`` (``ROW_FITS_BLOCK`` False) a row is walked in
``ceil(N / BLOCK_N)`` chunks.

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
    N,  # number of features in a row
    eps,  # added to the variance under the square root
    HAS_WEIGHT: tl.constexpr,  # multiply by gamma
    HAS_BIAS: tl.constexpr,  # add beta
    BLOCK_N: tl.constexpr,  # lanes per block, a power of two
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: the row is held in registers
):
    """y = (x - mean) * rstd * w + b for one row; saves mean and rstd (float32)."""
    row = tl.program_id(0).to(tl.int64)  # int64: row * stride may exceed 2**31
    X += row * stride_x
    Y += row * stride_y
    cols = tl.arange(0, BLOCK_N)
    if ROW_FITS_BLOCK:
        # The whole row is loaded once and stays in registers for both passes.
        mask = cols < N
        x = tl.load(X + cols, mask=mask, other=0.0).to(tl.float32)
        mean = tl.sum(x, axis=0) / N  # padding lanes hold 0: they do not change the sum
        # Padding lanes would hold 0 - mean: force them to 0 before squaring (triton #9838).
        xc = tl.where(mask, x - mean, 0.0)
        var = tl.sum(xc * xc, axis=0) / N
        rstd = 1.0 / tl.sqrt(var + eps)
        y = xc * rstd
        if HAS_WEIGHT:
            y = y * tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        if HAS_BIAS:
            y = y + tl.load(B + cols, mask=mask, other=0.0).to(tl.float32)
        tl.store(Y + cols, y.to(Y.dtype.element_ty), mask=mask)
    else:
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
            x = tl.load(X + c, mask=m, other=0.0).to(tl.float32)
            y = (x - mean) * rstd
            if HAS_WEIGHT:
                y = y * tl.load(W + c, mask=m, other=0.0).to(tl.float32)
            if HAS_BIAS:
                y = y + tl.load(B + c, mask=m, other=0.0).to(tl.float32)
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
    PartialDW,  # float32 (num_programs, N): one row of partial dgamma per program
    PartialDB,  # float32 (num_programs, N): one row of partial dbeta per program
    stride_x,  # elements between the starts of consecutive rows of X
    stride_dy,  # ... of DY
    stride_dx,  # ... of DX
    M,  # number of rows
    N,  # number of features in a row
    HAS_WEIGHT: tl.constexpr,  # the forward multiplied by gamma
    COMPUTE_DW: tl.constexpr,  # write partial dgamma
    COMPUTE_DB: tl.constexpr,  # write partial dbeta
    BLOCK_N: tl.constexpr,  # lanes per block, a power of two
    ROW_FITS_BLOCK: tl.constexpr,  # N <= BLOCK_N: the row is held in registers
):
    """dx for rows pid, pid + P, pid + 2P, ... and this program's partial sums of dw, db.

    With xhat = (x - mean) * rstd and wdy = w * dy (elementwise, one row):
        c1 = mean(xhat * wdy),  c2 = mean(wdy),  dx = (wdy - (xhat * c1 + c2)) * rstd
        partial dw += dy * xhat,  partial db += dy      (summed over this program's rows)
    Program ``pid`` owns row ``pid`` of the partial buffers and writes all of it (zeros when
    it received no rows), so no other program touches it: no atomics, no locks, and the
    order of every floating-point addition is fixed.
    """
    pid = tl.program_id(0)
    num_programs = tl.num_programs(0)
    cols = tl.arange(0, BLOCK_N)
    PartialDW += pid.to(tl.int64) * N
    PartialDB += pid.to(tl.int64) * N
    if ROW_FITS_BLOCK:
        mask = cols < N
        if HAS_WEIGHT:
            w = tl.load(W + cols, mask=mask, other=0.0).to(tl.float32)
        dw_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        db_acc = tl.zeros([BLOCK_N], dtype=tl.float32)
        for row in range(pid, M, num_programs):
            row64 = tl.cast(row, tl.int64)
            x = tl.load(X + row64 * stride_x + cols, mask=mask, other=0.0).to(tl.float32)
            dy = tl.load(DY + row64 * stride_dy + cols, mask=mask, other=0.0).to(tl.float32)
            mean = tl.load(Mean + row64)
            rstd = tl.load(Rstd + row64)
            xhat = tl.where(mask, (x - mean) * rstd, 0.0)
            if HAS_WEIGHT:
                wdy = w * dy
            else:
                wdy = dy
            c1 = tl.sum(xhat * wdy, axis=0) / N
            c2 = tl.sum(wdy, axis=0) / N
            dx = (wdy - (xhat * c1 + c2)) * rstd
            tl.store(DX + row64 * stride_dx + cols, dx.to(DX.dtype.element_ty), mask=mask)
            if COMPUTE_DW:
                dw_acc += dy * xhat
            if COMPUTE_DB:
                db_acc += dy
        if COMPUTE_DW:
            tl.store(PartialDW + cols, dw_acc, mask=mask)
        if COMPUTE_DB:
            tl.store(PartialDB + cols, db_acc, mask=mask)
    else:
        # Long rows: the partial sums live in this program's row of the float32 buffers
        # (read-modify-write, private to this program), which is zeroed first.
        for start in range(0, N, BLOCK_N):
            c = start + cols
            if COMPUTE_DW:
                tl.store(PartialDW + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
            if COMPUTE_DB:
                tl.store(PartialDB + c, tl.zeros([BLOCK_N], dtype=tl.float32), mask=c < N)
        for row in range(pid, M, num_programs):
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
            # Pass 2: dx, and this row's contribution to the partial dw, db.
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
def sum_rows_kernel(
    Partial,  # pointer to the float32 partial sums (G, N), contiguous
    Out,  # pointer to the column sums (N,), in the parameter's dtype
    G,  # number of partial rows
    N,  # number of columns
    BLOCK_G: tl.constexpr,  # partial rows added per step
    BLOCK_N: tl.constexpr,  # columns per program
):
    """Out[j] = sum_g Partial[g, j] for the BLOCK_N columns of this program, in fixed order."""
    pid = tl.program_id(0)
    cols = pid * BLOCK_N + tl.arange(0, BLOCK_N)
    acc = tl.zeros([BLOCK_G, BLOCK_N], dtype=tl.float32)
    for start in range(0, G, BLOCK_G):
        rows = start + tl.arange(0, BLOCK_G)
        mask = (rows[:, None] < G) & (cols[None, :] < N)
        acc += tl.load(Partial + rows[:, None].to(tl.int64) * N + cols[None, :], mask=mask,
                       other=0.0)
    total = tl.sum(acc, axis=0)
    tl.store(Out + cols, total.to(Out.dtype.element_ty), mask=cols < N)
