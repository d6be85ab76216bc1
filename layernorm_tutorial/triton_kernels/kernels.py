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
    X, Y, W, B, Mean, Rstd,  # pointers: input/output rows, gamma, beta, per-row statistics
    stride_x, stride_y,  # elements between the starts of consecutive rows
    N, eps,
    HAS_WEIGHT: tl.constexpr, HAS_BIAS: tl.constexpr,
    BLOCK_N: tl.constexpr, ROW_FITS_BLOCK: tl.constexpr,
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
def layer_norm_bwd_kernel(
    DX, DY, X, W, Mean, Rstd,  # pointers
    PartialDW, PartialDB,  # float32 buffers of shape (num_programs, N): one row per program
    stride_x, stride_dy, stride_dx,
    M, N,
    HAS_WEIGHT: tl.constexpr, COMPUTE_DW: tl.constexpr, COMPUTE_DB: tl.constexpr,
    BLOCK_N: tl.constexpr, ROW_FITS_BLOCK: tl.constexpr,
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
                x = tl.load(X + row64 * stride_x + c, mask=m, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * stride_dy + c, mask=m, other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    wdy = tl.load(W + c, mask=m, other=0.0).to(tl.float32) * dy
                else:
                    wdy = dy
                sum_xhat_wdy += xhat * wdy
                sum_wdy += wdy
            c1 = tl.sum(sum_xhat_wdy, axis=0) / N
            c2 = tl.sum(sum_wdy, axis=0) / N
            # Pass 2: dx, and this row's contribution to the partial dw, db.
            for start in range(0, N, BLOCK_N):
                c = start + cols
                m = c < N
                x = tl.load(X + row64 * stride_x + c, mask=m, other=0.0).to(tl.float32)
                dy = tl.load(DY + row64 * stride_dy + c, mask=m, other=0.0).to(tl.float32)
                xhat = tl.where(m, (x - mean) * rstd, 0.0)
                if HAS_WEIGHT:
                    wdy = tl.load(W + c, mask=m, other=0.0).to(tl.float32) * dy
                else:
                    wdy = dy
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
    Partial, Out,  # Partial: float32 (G, N) contiguous; Out: (N,) in the parameter's dtype
    G, N,
    BLOCK_G: tl.constexpr, BLOCK_N: tl.constexpr,
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
