r"""A norm at inference and under quantization: weight conventions, integer arithmetic,
rotations and smoothing folded into the norm.

Gain conventions (traced from ``transformers``): :func:`gemma_norms_traced` builds
``Gemma3RMSNorm``, whose output is :math:`\mathrm{cast}(\hat x \odot (1 + w))` with ``w``
starting at 0 (a stored zero is a unit gain), and ``LlamaRMSNorm``, whose output is
:math:`w \odot \hat x` with ``w`` starting at 1, and gives both the same weights: what a
converter that forgets the ``+1`` runs. :func:`gain_storage_error` measures what storing
``1 + w`` instead of ``w`` costs in bf16.

Integer arithmetic: :func:`traced_int_layer_norm` is I-BERT's ``IntLayerNorm`` from
``transformers``: integer mean, a right shift that keeps the sum of squares below
:math:`2^{32}`, ``floor(sqrt)``, a fixed-point reciprocal :math:`\lfloor 2^{31}/\sigma\rfloor`.

Rotations (SliceGPT's computational invariance, used by QuaRot): with :math:`Q` orthogonal,
:math:`\mathrm{RMSNorm}(xQ) = \mathrm{RMSNorm}(x)Q` when the norm has no gain, and
:math:`\mathrm{LayerNorm}(x) = \mathrm{RMSNorm}(xM)` with :math:`M = I - \tfrac1D 11^\top`.
:func:`rotate_pre_norm_block` rewrites ``linear_out(norm(linear_in(h)))`` so that the
stream between the two linear layers is rotated: the mean subtraction moves into
``linear_in``, the norm's gain and bias into ``linear_out``, and ``Q`` into both.

Smoothing (SmoothQuant): :func:`smoothing_factors` and :func:`fold_smoothing_into_norm`
divide the norm's output channel ``j`` by :math:`s_j` through its :math:`\gamma_j,\beta_j`
and multiply the consuming weights' column ``j`` by :math:`s_j`. In a Post-LN block
(:func:`post_ln_block`) that norm's output is also the residual stream, so the fold divides
the skip path by :math:`s` too, unless the skip is multiplied back (``skip_scale``).
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import torch

from layernorm_tutorial import functional as LF

__all__ = ["gemma_norms_traced", "gemma_gain_with_ones_init", "gain_storage_error",
           "traced_int_layer_norm",
           "mean_subtraction_matrix", "random_orthogonal", "RotatedBlock",
           "rotate_pre_norm_block", "pre_norm_block", "commutation_gap", "max_to_rms",
           "channel_absmax_spread",
           "smoothing_factors", "fold_smoothing_into_norm", "post_ln_block"]


def _normalized_fp32(x: torch.Tensor, eps: float) -> torch.Tensor:
    h = x.to(torch.float32)
    return h * torch.rsqrt(h.pow(2).mean(-1, keepdim=True) + eps)


def gemma_norms_traced(dim: int = 8, seed: int = 0) -> dict:
    """Build ``transformers``' ``Gemma3RMSNorm(dim)`` and ``LlamaRMSNorm(dim)`` (module
    classes only: no configuration, no download), read the Gemma norm's initial weight,
    then give both the same random small weight ``w`` and apply them to one random
    float32 row. Returns the initial weight, the two outputs, ``x_hat`` and ``w``."""
    with warnings.catch_warnings():          # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm
        from transformers.models.llama.modeling_llama import LlamaRMSNorm

    gemma, llama = Gemma3RMSNorm(dim, eps=1e-6), LlamaRMSNorm(dim, eps=1e-6)
    initial = gemma.weight.detach().clone()
    g = torch.Generator().manual_seed(seed)
    w = 0.1 * torch.randn(dim, generator=g)
    x = torch.randn(1, dim, generator=g)
    with torch.no_grad():
        gemma.weight.copy_(w)
        llama.weight.copy_(w)
        return {"initial_weight": initial, "w": w, "x_hat": _normalized_fp32(x, 1e-6),
                "gemma": gemma(x), "llama_with_gemma_weights": llama(x)}


def gemma_gain_with_ones_init(dim: int = 8, rows: int = 4, seed: int = 0) -> float:
    """The gain of ``transformers``' ``Gemma3RMSNorm(dim)`` when a generic initializer fills
    its weight with ones (as ``PreTrainedModel._init_weights`` does for norm weights):
    mean of ``Gemma3RMSNorm(x) / rms_norm(x)`` over ``rows`` random rows, which is
    ``1 + w = 2`` for the output ``x_hat * (1 + w)``."""
    with warnings.catch_warnings():          # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers.models.gemma3.modeling_gemma3 import Gemma3RMSNorm

    norm = Gemma3RMSNorm(dim, eps=1e-6)
    torch.nn.init.ones_(norm.weight)
    x = torch.randn(rows, dim, generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        return float((norm(x) / LF.rms_norm(x, (dim,), eps=1e-6)).mean())


def gain_storage_error(w: torch.Tensor, dtype=torch.bfloat16) -> tuple[float, float]:
    """Largest error of the gain ``1 + w`` (``w`` float64) when a checkpoint stores, in
    ``dtype``, either ``w`` itself (the gain is then ``1 + round(w)``) or ``1 + w``
    (``round(1 + w)``, what a converter to a plain ``x_hat * gain`` norm writes)."""
    gain = 1.0 + w
    stored_w = 1.0 + w.to(dtype).to(torch.float64)
    stored_gain = gain.to(dtype).to(torch.float64)
    return float((stored_w - gain).abs().max()), float((stored_gain - gain).abs().max())


def traced_int_layer_norm(hidden: int, seed: int = 0):
    """``transformers``' ``IntLayerNorm`` (I-BERT, ``models/ibert/quant_modules.py``) of
    width ``hidden`` in quantized mode, with a random gain in [0.5, 1.5) and a small random
    bias, in evaluation mode. Call it as ``layer(x, scaling_factor)`` with ``x`` ``(B, T,
    hidden)`` holding integers times ``scaling_factor`` ``(1,)``; it returns ``(y,
    output_scaling_factor)``."""
    with warnings.catch_warnings():          # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers.models.ibert.quant_modules import IntLayerNorm

    g = torch.Generator().manual_seed(seed)
    layer = IntLayerNorm(hidden, eps=1e-5, quant_mode=True)
    with torch.no_grad():
        layer.weight.copy_(torch.rand(hidden, generator=g) + 0.5)
        layer.bias.copy_(0.1 * torch.randn(hidden, generator=g))
    return layer.eval()


def mean_subtraction_matrix(d: int, dtype=torch.float64) -> torch.Tensor:
    """:math:`M = I - \\tfrac1d 11^\\top` ``(d, d)``: ``x @ M`` subtracts each row's mean."""
    return torch.eye(d, dtype=dtype) - torch.full((d, d), 1.0 / d, dtype=dtype)


def random_orthogonal(d: int, seed: int = 0, dtype=torch.float64) -> torch.Tensor:
    """A random orthogonal ``(d, d)`` matrix (QR of a Gaussian matrix, signs fixed)."""
    g = torch.Generator().manual_seed(seed)
    q, r = torch.linalg.qr(torch.randn(d, d, generator=g, dtype=dtype))
    return q * torch.sign(torch.diagonal(r))


def pre_norm_block(h, w_in, b_in, w_out, b_out, norm: str = "layer", gamma=None, beta=None,
                   eps: float = 1e-5) -> torch.Tensor:
    """``linear_out(norm(linear_in(h)))`` with row vectors: ``x = h @ w_in.T + b_in``
    ``(B, D)``, ``norm`` ``"layer"`` (with ``gamma``, ``beta``) or ``"rms"`` (``gamma``
    only), output ``norm(x) @ w_out.T + b_out``."""
    x = h @ w_in.T + b_in
    d = x.shape[-1]
    if norm == "layer":
        y = LF.layer_norm(x, (d,), gamma, beta, eps=eps)
    elif norm == "rms":
        y = LF.rms_norm(x, (d,), gamma, eps=eps)
    else:
        raise ValueError(f"norm must be 'layer' or 'rms', got {norm!r}")
    return y @ w_out.T + b_out


@dataclass(frozen=True)
class RotatedBlock:
    """The weights of :func:`pre_norm_block` after the rewrite: use with ``norm="rms"``
    and no gain. ``w_in`` ``(D, D_in)``, ``b_in`` ``(D,)``, ``w_out`` ``(O, D)``,
    ``b_out`` ``(O,)``."""

    w_in: torch.Tensor
    b_in: torch.Tensor
    w_out: torch.Tensor
    b_out: torch.Tensor


def rotate_pre_norm_block(w_in, b_in, gamma, beta, w_out, b_out, q) -> RotatedBlock:
    r"""Rewrite a LayerNorm block for a rotated stream (all row-vector conventions).

    1. Mean subtraction into ``linear_in``: ``W_in <- M W_in``, ``b_in <- M b_in``, so the
       stream already has zero mean and LayerNorm becomes RMSNorm (same eps).
    2. Gain and bias into ``linear_out``: ``W_out <- W_out diag(gamma)``, ``b_out <- b_out
       + W_out beta``.
    3. Rotation: the stream becomes ``x Q``: ``W_in <- Q^T W_in``, ``b_in <- b_in Q``,
       ``W_out <- W_out Q``; the gainless RMSNorm commutes with ``Q``.
    """
    m = mean_subtraction_matrix(w_in.shape[0], w_in.dtype)
    w_in_c, b_in_c = m @ w_in, b_in @ m
    w_out_f, b_out_f = w_out * gamma, b_out + w_out @ beta
    return RotatedBlock(w_in=q.T @ w_in_c, b_in=b_in_c @ q, w_out=w_out_f @ q, b_out=b_out_f)


def commutation_gap(norm, x: torch.Tensor, q: torch.Tensor) -> float:
    """``max |norm(x @ q) - norm(x) @ q|``: zero when the row-wise map ``norm`` commutes
    with the orthogonal ``q`` ``(D, D)``; ``x`` ``(B, D)``."""
    return float((norm(x @ q) - norm(x) @ q).abs().max())


def channel_absmax_spread(x: torch.Tensor) -> float:
    """Largest channel's ``max |x|`` over the median channel's, for ``x`` ``(tokens, D)``:
    how much one per-tensor scale is stretched by a few outlier channels."""
    absmax = x.abs().amax(dim=0)
    return float(absmax.max() / absmax.median())


def max_to_rms(x: torch.Tensor) -> float:
    """``max |x| / rms(x)`` over the whole tensor: how far the largest value sits above a
    typical one (what one int8 scale per tensor has to cover)."""
    return float(x.abs().max() / x.pow(2).mean().sqrt())


def smoothing_factors(act_absmax: torch.Tensor, weight: torch.Tensor | list[torch.Tensor],
                      alpha: float = 0.5) -> torch.Tensor:
    r""":math:`s_j = \max|X_j|^\alpha / \max|W_j|^{1-\alpha}` per input channel ``j``;
    ``act_absmax`` ``(D,)`` from calibration data, ``weight`` one ``(O, D)`` matrix or a
    list of those that read the same activations (one ``s`` for all of them)."""
    if not 0.0 <= alpha <= 1.0:
        raise ValueError(f"alpha must be in [0, 1], got {alpha}")
    weights = weight if isinstance(weight, list) else [weight]
    w_absmax = torch.stack([w.abs().amax(dim=0) for w in weights]).amax(dim=0)
    return act_absmax.pow(alpha) / w_absmax.pow(1 - alpha)


def fold_smoothing_into_norm(gamma, beta, weights: list[torch.Tensor], s: torch.Tensor):
    """``(gamma / s, beta / s, [w * s for w in weights])``: the norm's output channel
    ``j`` is divided by ``s_j`` and every consuming weight's column ``j`` multiplied by it,
    so each ``norm(x) @ w.T`` is unchanged."""
    return gamma / s, beta / s, [w * s for w in weights]


def post_ln_block(z, gamma, beta, w1, w2, skip_scale=None, eps: float = 1e-5):
    """Two Post-LN steps with row vectors: ``h = LN(z; gamma, beta)`` ``(B, D)`` is both
    the input of the MLP ``relu(h @ w1.T) @ w2.T`` (``w1`` ``(F, D)``, ``w2`` ``(D, F)``)
    and the skip path; the block returns ``LN(skip + mlp(h))`` (second norm without
    affine), where ``skip = h * skip_scale`` (``skip_scale`` ``(D,)``, default: ``h``)."""
    d = z.shape[-1]
    h = LF.layer_norm(z, (d,), gamma, beta, eps=eps)
    skip = h if skip_scale is None else h * skip_scale
    return LF.layer_norm(skip + torch.relu(h @ w1.T) @ w2.T, (d,), eps=eps)
