r"""The dtype casts inside Hugging Face's RMSNorm classes, traced and measured.

``transformers``' ``LlamaRMSNorm.forward`` (``modeling_llama.py``) computes

.. math:: y = w \odot \mathrm{cast}_{\text{in}}\!\Big(
          \frac{x_{32}}{\sqrt{\tfrac1H\sum_i x_{32,i}^2 + \epsilon}}\Big),
          \qquad x_{32} = \mathrm{cast}_{32}(x),

that is: upcast the input to fp32, compute the mean square and the normalization in fp32,
cast back to the input's dtype, *then* multiply by the weight. ``GemmaRMSNorm`` multiplies
by its gain :math:`1+w` in fp32 and casts once at the end. This module reads those methods'
source and measures what the casts buy:

``traced_forward(name)``        the lines of ``forward`` of a ``transformers`` norm class
``traced_norm(name, hidden)``   an instance of that class (fp32 parameters)
``rms_norm_without_upcast``     Llama's formula computed in the input's dtype
``cast_order_errors()``         relative rounding error of Llama's and Gemma's orders in bf16
``llama_output_dtype(w, x)``    the output dtype of ``LlamaRMSNorm`` for given dtypes

Importing ``transformers`` takes seconds; each function imports it when called.
"""

from __future__ import annotations

import inspect
import math
import textwrap
import warnings

import torch

__all__ = ["TRACED", "traced_forward", "traced_norm", "rms_norm_without_upcast",
           "cast_order_errors", "llama_output_dtype"]

#: The traced classes and the ``transformers`` modules that define them.
TRACED = {"LlamaRMSNorm": "transformers.models.llama.modeling_llama",
          "GemmaRMSNorm": "transformers.models.gemma.modeling_gemma",
          "T5LayerNorm": "transformers.models.t5.modeling_t5"}


def _traced_class(name: str):
    import importlib

    if name not in TRACED:
        raise ValueError(f"name must be one of {sorted(TRACED)}, got {name!r}")
    with warnings.catch_warnings():              # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        module = importlib.import_module(TRACED[name])
    return getattr(module, name)


def traced_forward(name: str) -> list[str]:
    """The non-blank, non-comment lines of ``forward`` of the ``transformers`` class
    ``name`` (a key of :data:`TRACED`), dedented, as the installed version defines it."""
    source = inspect.getsource(_traced_class(name).forward)
    lines = textwrap.dedent(source).splitlines()
    return [line for line in lines if line.strip() and not line.strip().startswith("#")]


def traced_norm(name: str, hidden_size: int, eps: float = 1e-6) -> torch.nn.Module:
    """``transformers``' class ``name`` (a key of :data:`TRACED`) for ``hidden_size``
    features and ``eps``, with its default fp32 parameters."""
    return _traced_class(name)(hidden_size, eps=eps)


def rms_norm_without_upcast(x: torch.Tensor, weight: torch.Tensor,
                            eps: float = 1e-6) -> torch.Tensor:
    r"""``LlamaRMSNorm``'s formula with the casts removed: the mean square, the reciprocal
    root and the products all in ``x``'s dtype. ``x`` ``(*, H)``, ``weight`` ``(H,)``.

    .. math:: y = w \odot x / \sqrt{\tfrac1H\sum_i x_i^2 + \epsilon}

    In fp16, :math:`x_i^2` overflows to inf once :math:`|x_i|` exceeds about 256, the
    reciprocal root of inf is 0, and the whole row comes out as zeros: no NaN, no error.
    """
    variance = x.pow(2).mean(-1, keepdim=True)
    return weight * (x * torch.rsqrt(variance + eps))


def cast_order_errors(features: int = 64, rows: int = 4096, seed: int = 0) -> dict:
    r"""Rounding error of the two cast orders, with bf16 input and bf16 parameters.

    Builds ``LlamaRMSNorm`` (cast to bf16, then multiply by the bf16 weight: two roundings)
    and ``GemmaRMSNorm`` (multiply in fp32 by :math:`1+w`, cast once) with the same gains
    :math:`\gamma_i = 1 + k_i/64` (exact in bf16, as is :math:`k_i/64`), runs both on the
    same bf16 input ``(rows, features)`` and compares with the float64 RMSNorm of that
    input. Returns ``{"llama": (max, mean), "gemma": (max, mean)}`` relative errors and
    ``"unit_roundoff"``, bf16's :math:`u = 2^{-8}`: one rounding stays within :math:`u`,
    two within :math:`2u + u^2`.
    """
    import torch.nn.functional as F

    llama_cls, gemma_cls = _traced_class("LlamaRMSNorm"), _traced_class("GemmaRMSNorm")
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, features, generator=g).bfloat16()
    k = torch.randint(0, 64, (features,), generator=g).double()
    gains = 1.0 + k / 64
    llama, gemma = llama_cls(features), gemma_cls(features)
    with torch.no_grad():
        llama.weight.copy_(gains)
        gemma.weight.copy_(k / 64)                       # Gemma's gain is 1 + weight
    reference = F.rms_norm(x.double(), (features,), gains, eps=1e-6)
    out = {}
    for name, norm in (("llama", llama.bfloat16()), ("gemma", gemma.bfloat16())):
        with torch.no_grad():
            y = norm(x).double()
        rel = ((y - reference).abs() / reference.abs()).nan_to_num()   # 0/0 -> 0
        out[name] = (rel.max().item(), rel.mean().item())
    out["unit_roundoff"] = math.ldexp(1.0, -8)
    return out


def llama_output_dtype(weight_dtype: torch.dtype, input_dtype: torch.dtype) -> torch.dtype:
    """The dtype ``LlamaRMSNorm`` returns for a weight of ``weight_dtype`` and an input of
    ``input_dtype``: the cast back happens before the weight multiply, so the result takes
    torch's promotion of the two (an fp32 weight turns a bf16 input into an fp32 output)."""
    norm = _traced_class("LlamaRMSNorm")(4).to(weight_dtype)
    with torch.no_grad():
        return norm(torch.ones(2, 4, dtype=input_dtype)).dtype
