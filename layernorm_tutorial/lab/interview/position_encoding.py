r"""QK-norm and rotary position embeddings (RoPE): what commutes, and in which order real
models apply them.

RoPE (the ``rotate_half`` convention of ``transformers``) rotates feature pairs
:math:`(i, i + d/2)` of each head by the angle :math:`p\,\theta_i`,
:math:`\theta_i = \mathrm{base}^{-2i/d}`, at position :math:`p`:

.. math::

    \mathrm{rope}(x, p) = x \odot \cos(p\theta) + \mathrm{rotate\_half}(x) \odot \sin(p\theta),
    \qquad \mathrm{rotate\_half}(x_1, x_2) = (-x_2, x_1).

It is an orthogonal map :math:`R_p`, so it keeps every norm: an RMSNorm *without gain*
over the head (or over the whole projection, RoPE acting on each head) commutes with it,
:math:`\mathrm{RMSNorm}(R_p x) = R_p\,\mathrm{RMSNorm}(x)`. A per-channel gain
:math:`\gamma` commutes with :math:`R_p` only when :math:`\gamma_i = \gamma_{i+d/2}` for
every rotated pair; and a mean subtraction never does (a rotation moves the all-ones
direction). Applied *before* RoPE, the norm keeps :math:`q_m^\top k_n` a function of
:math:`m - n` alone (:math:`R_m^\top R_n = R_{n-m}`); a gain applied *after* RoPE puts
:math:`R_m^\top \mathrm{diag}(\gamma_q\gamma_k) R_n` between them, which depends on
:math:`m` and :math:`n` separately.

:func:`cached_key_order` traces a tiny random ``transformers`` model (Qwen3, OLMo 2,
Gemma 3) and compares the keys in its KV cache with both orders.
"""

from __future__ import annotations

import torch

from layernorm_tutorial import functional as LF

__all__ = ["rope_cos_sin", "rotate_half", "apply_rope", "qk_score",
           "cached_key_order", "QK_NORM_MODELS"]


def rope_cos_sin(positions: torch.Tensor, dim: int, base: float = 10000.0,
                 dtype=torch.float64) -> tuple[torch.Tensor, torch.Tensor]:
    """``(cos, sin)``, each ``(len(positions), dim)``: angles ``p * base**(-2i/dim)`` for
    ``i < dim/2``, repeated for the two halves (``transformers``' default RoPE)."""
    if dim % 2:
        raise ValueError(f"dim must be even, got {dim}")
    inv_freq = base ** (-torch.arange(0, dim, 2, dtype=dtype) / dim)
    angles = positions.to(dtype)[:, None] * inv_freq[None, :]
    emb = torch.cat([angles, angles], dim=-1)
    return emb.cos(), emb.sin()


def rotate_half(x: torch.Tensor) -> torch.Tensor:
    """``(x1, x2) -> (-x2, x1)`` on the last dimension split in halves."""
    half = x.shape[-1] // 2
    return torch.cat([-x[..., half:], x[..., :half]], dim=-1)


def apply_rope(x: torch.Tensor, positions: torch.Tensor, base: float = 10000.0) -> torch.Tensor:
    """RoPE of ``x`` ``(..., T, d)`` at ``positions`` ``(T,)``; same shape and dtype."""
    cos, sin = rope_cos_sin(positions, x.shape[-1], base, x.dtype)
    return x * cos + rotate_half(x) * sin


def qk_score(q: torch.Tensor, k: torch.Tensor, m: int, n: int, gamma_q: torch.Tensor,
             gamma_k: torch.Tensor, order: str, base: float = 10000.0,
             eps: float = 1e-6) -> float:
    """The attention logit (times ``sqrt(d)``) between a query ``q`` ``(d,)`` at position
    ``m`` and a key ``k`` at ``n`` with RMSNorm(gain) and RoPE in ``order``:
    ``"norm-rope"`` (normalize, then rotate: what Qwen3, OLMo 2, Gemma 3 do) or
    ``"rope-norm"`` (rotate, then normalize)."""
    if order not in ("norm-rope", "rope-norm"):
        raise ValueError(f"order must be 'norm-rope' or 'rope-norm', got {order!r}")
    d = q.shape[-1]

    def one(v, p, gamma):
        pos = torch.tensor([p])
        if order == "norm-rope":
            return apply_rope(LF.rms_norm(v, (d,), gamma, eps)[None], pos, base)[0]
        return LF.rms_norm(apply_rope(v[None], pos, base)[0], (d,), gamma, eps)

    return float(one(q, m, gamma_q) @ one(k, n, gamma_k))


#: The three models traced: name -> (model class, configuration class).
QK_NORM_MODELS = {"Qwen3": ("Qwen3ForCausalLM", "Qwen3Config"),
                  "OLMo 2": ("Olmo2ForCausalLM", "Olmo2Config"),
                  "Gemma 3": ("Gemma3ForCausalLM", "Gemma3TextConfig")}


def _rope_base(config, layer: int = 0) -> float:
    params = config.rope_parameters
    if "rope_theta" not in params:                 # Gemma 3: one entry per layer type
        params = params[config.layer_types[layer]]
    return float(params["rope_theta"])


def cached_key_order(name: str, tokens: int = 5, seed: int = 0) -> dict:
    """Run a tiny random ``transformers`` model ``name`` (a key of
    :data:`QK_NORM_MODELS`; 4 heads of 8, 2 key-value heads, float64) with its
    ``k_norm`` gain set to random values, record ``k_proj``'s output, and compare the
    keys of layer 0 in the KV cache with ``rope(k_norm(k))`` and ``k_norm(rope(k))``
    (RoPE by :func:`apply_rope`). Returns ``{"norm_then_rope": max |diff|,
    "rope_then_norm": max |diff|, "k_norm_width": ...}``."""
    from layernorm_tutorial.lab.interview.traced_models import tiny

    heads, kv_heads, head_dim = 4, 2, 8
    model_class, config_class = QK_NORM_MODELS[name]
    model = tiny(model_class, config_class, seed=seed, vocab_size=64, hidden_size=32,
                 intermediate_size=64, num_hidden_layers=1, num_attention_heads=heads,
                 num_key_value_heads=kv_heads, head_dim=head_dim, bos_token_id=None,
                 eos_token_id=None, pad_token_id=None)
    attention = model.model.layers[0].self_attn
    g = torch.Generator().manual_seed(seed + 1)
    with torch.no_grad():
        attention.k_norm.weight.copy_(0.5 * torch.randn(attention.k_norm.weight.shape,
                                                        generator=g, dtype=torch.float64))
    seen = {}
    hook = attention.k_proj.register_forward_hook(
        lambda module, args, out: seen.setdefault("k", out.detach()))
    ids = torch.arange(3, 3 + tokens)[None]
    with torch.no_grad():
        cached = model(ids, use_cache=True).past_key_values.layers[0].keys  # (1, kv, T, d)
    hook.remove()
    k = seen["k"]                                                     # (1, T, kv * d)
    base = _rope_base(model.config)
    positions = torch.arange(tokens)
    width = attention.k_norm.weight.shape[0]

    def k_norm(t):                            # over the head, or over all heads (OLMo 2)
        if width == head_dim:
            return attention.k_norm(t.view(1, tokens, kv_heads, head_dim)).transpose(1, 2)
        return attention.k_norm(t).view(1, tokens, kv_heads, head_dim).transpose(1, 2)

    def heads_of(t):
        return t.view(1, tokens, kv_heads, head_dim).transpose(1, 2)

    with torch.no_grad():
        norm_then_rope = apply_rope(k_norm(k), positions, base)
        rotated = apply_rope(heads_of(k), positions, base)            # (1, kv, T, d)
        rope_then_norm = k_norm(rotated.transpose(1, 2).reshape(1, tokens, -1))
    return {"norm_then_rope": float((cached - norm_then_rope).abs().max()),
            "rope_then_norm": float((cached - rope_then_norm).abs().max()),
            "k_norm_width": width, "head_dim": head_dim, "kv_heads": kv_heads}
