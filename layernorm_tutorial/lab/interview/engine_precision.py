r"""LayerNorm in a reduced-precision inference engine: the exported graph that overflows,
the fp32 statistics that do not, and how little of a block the norms are.

An exporter without a fused LayerNorm op writes the norm as elementary graph nodes,
``ReduceMean``, ``Sub``, ``Pow`` (or ``Mul``), ``ReduceMean``, ``Add``, ``Sqrt``, ``Div``
(ONNX's own definition of ``LayerNormalization`` lists the same steps). An engine that
builds that graph in fp16 rounds every node's output to fp16, whose largest finite value
is 65504:

- ``Pow``: a deviation larger than :math:`\sqrt{65504} \approx 255.9` squares to ``inf``;
- a ``ReduceMean`` that accumulates its sum in fp16 overflows once
  :math:`\sum_j (x_j - \mu)^2 > 65504`, e.g. :math:`H = 4096` deviations of size 4,
  although every square and the mean square are small.

:func:`decomposed_layer_norm` runs that graph with every node rounded to ``dtype`` and the
sums accumulated in ``accumulate`` (one element at a time, as a naive reduction kernel
would); ``dtype=float32`` (the whole first stage in fp32), with the output rounded to fp16
afterwards, is ONNX's ``stash_type=1``. :func:`fp16_softmax` shows the softmax's own trap:
:math:`e^{x}` overflows fp16 above :math:`x \approx 11.09`, unless the row's maximum is
subtracted first. :func:`block_shares` counts a Transformer block's parameters and forward
flops per token that sit in its matrix multiplications and in its norms and softmax.
"""

from __future__ import annotations

import numpy as np

__all__ = ["FP16_MAX", "decomposed_layer_norm", "fp16_softmax", "block_shares"]

FP16_MAX = float(np.finfo(np.float16).max)


def _accumulate(values: np.ndarray, dtype) -> np.ndarray:
    """Row sums of ``values`` ``(rows, H)``, one element at a time, each partial sum
    rounded to ``dtype``."""
    acc = np.zeros(values.shape[0], dtype=dtype)
    for column in values.T.astype(dtype):
        acc = (acc + column).astype(dtype)
    return acc


def decomposed_layer_norm(x, dtype=np.float16, accumulate=None, eps: float = 1e-5) -> dict:
    """LayerNorm (no affine) of ``x`` ``(rows, H)`` as the exported graph computes it,
    every node's output rounded to ``dtype`` and the two ``ReduceMean`` sums accumulated
    in ``accumulate`` (default: ``dtype``). With ``dtype=np.float32`` the whole first
    stage runs in fp32 (``stash_type=1``).

    Returns ``{"y", "squares_max", "sum_squares", "var", "nonfinite"}``: the output, the
    largest ``Pow`` output, the accumulated sum of squares and the variance per row (as
    float64 arrays holding the rounded values), and whether any output is inf or NaN.
    """
    x = np.asarray(x, dtype=np.float64)
    if x.ndim != 2 or x.shape[1] == 0:
        raise ValueError(f"x must be (rows, H) with H > 0, got shape {x.shape}")
    acc = np.dtype(accumulate if accumulate is not None else dtype).type
    node = np.dtype(dtype).type
    hidden = x.shape[1]
    with np.errstate(over="ignore", invalid="ignore", divide="ignore"):
        v = x.astype(node)
        mean = (_accumulate(v, acc) / acc(hidden)).astype(node)              # ReduceMean
        d = (v - mean[:, None]).astype(node)                                  # Sub
        dd = (d * d).astype(node)                                             # Pow
        sum_sq = _accumulate(dd, acc)
        var = (sum_sq / acc(hidden)).astype(node)                             # ReduceMean
        std = np.sqrt((var + node(eps)).astype(node)).astype(node)           # Add, Sqrt
        y = (d / std[:, None]).astype(node)                                   # Div
    return {"y": y.astype(np.float64), "squares_max": dd.astype(np.float64).max(axis=1),
            "sum_squares": sum_sq.astype(np.float64), "var": var.astype(np.float64),
            "nonfinite": bool(~np.isfinite(y).all())}


def fp16_softmax(logits, subtract_max: bool = True) -> np.ndarray:
    """Softmax of the 1-D ``logits`` with every operation in fp16 (``exp``, the sum, the
    division), after subtracting the maximum or not. Returns float64 values (NaN where
    ``inf / inf``)."""
    z = np.asarray(logits, dtype=np.float16)
    if z.ndim != 1 or z.size == 0:
        raise ValueError(f"logits must be a non-empty 1-D array, got shape {z.shape}")
    with np.errstate(over="ignore", invalid="ignore"):
        if subtract_max:
            z = (z - z.max()).astype(np.float16)
        e = np.exp(z).astype(np.float16)
        return (e / e.sum(dtype=np.float16)).astype(np.float64)


def block_shares(d_model: int, d_ff: int, context: int, heads: int) -> dict:
    """Parameters and forward flops per token of a pre-norm Transformer block: attention
    projections (``4 d^2``), a two-matrix MLP (``2 d d_ff``), two norms (gain and bias:
    ``4 d``), and the attention over ``context`` positions (``QK^T`` and ``AV``: ``4
    context d`` flops; softmax about 5 flops per score: ``5 heads context``). Norm flops:
    about 7 per element (LayerNorm) for 2 norms. Returns the shares of parameters and of
    flops in the matrix multiplications and in the norms and softmax."""
    if min(d_model, d_ff, context, heads) < 1:
        raise ValueError("d_model, d_ff, context and heads must be >= 1")
    matmul_params = 4 * d_model**2 + 2 * d_model * d_ff
    norm_params = 4 * d_model
    matmul_flops = 2 * matmul_params + 4 * context * d_model
    elementwise_flops = 2 * 7 * d_model + 5 * heads * context
    params = matmul_params + norm_params
    flops = matmul_flops + elementwise_flops
    return {"params_matmul": matmul_params / params, "params_norm": norm_params / params,
            "flops_matmul": matmul_flops / flops,
            "flops_norm_softmax": elementwise_flops / flops}
