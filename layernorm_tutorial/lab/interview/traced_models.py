r"""Facts about real models, read from the ``transformers`` code and configuration classes.

Every model is built from its configuration class with tiny sizes and random weights (float64,
eval mode); nothing is downloaded. Each function returns what the interview answer quotes,
so the number comes from the library's own code, not from a sentence:

``tiny(model_class, config_class, **sizes)``  the random-weight model (warnings silenced)
``parallel_block_norms()``  norms per block of GPT-J's parallel block, GPT-NeoX's parallel
                            block and GPT-2's serial block (``GPTJBlock`` holds one
                            ``ln_1``; ``GPTNeoXLayer`` two)
``tiny_gptj_block()``       one ``GPTJBlock`` and its position ids
``qk_norm_shapes()``        the gain shape of ``q_norm``/``k_norm`` in OLMo 2, Qwen3, Gemma 3
``config_defaults()``       defaults of the configuration classes that the answers quote
``bloom_embedding_norm()``  BLOOM's LayerNorm right after the word embedding, traced
``deepseek_v3_latent_norms()``  what DeepSeek-V3's ``q_a_layernorm``/``kv_a_layernorm`` see
``deepseek_v3_router()``    the router's top-k weights for a few tokens
``softmax_routers()``       Mixtral's and Qwen2-MoE's softmax routers: what their top-k
                            weights sum to, and Mixtral's against a softmax over the top-k
``glm_norms()``             the norms of one block of ``GlmModel`` and ``Glm4Model``
``gemma3_boundary_norms()``  the ``post_attention_layernorm`` and ``pre_feedforward_layernorm``
                            of a ``Gemma3DecoderLayer``, with random gains

Importing ``transformers`` takes several seconds; each function imports it when called.
"""

from __future__ import annotations

import contextlib
import warnings

import torch
from torch import nn

__all__ = ["tiny", "parallel_block_norms", "tiny_gptj_block", "qk_norm_shapes",
           "config_defaults", "bloom_embedding_norm", "deepseek_v3_latent_norms",
           "deepseek_v3_router", "softmax_routers", "glm_norms", "norm_modules",
           "gemma3_boundary_norms"]

_F64 = torch.float64
_TOKENS = {"bos_token_id": None, "eos_token_id": None, "pad_token_id": None}


@contextlib.contextmanager
def _quiet():
    with warnings.catch_warnings():          # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers

    level = transformers.logging.get_verbosity()
    transformers.logging.set_verbosity_error()
    try:
        yield transformers
    finally:
        transformers.logging.set_verbosity(level)


def tiny(model_class: str, config_class: str, seed: int = 0, **sizes) -> nn.Module:
    """``transformers.<model_class>(transformers.<config_class>(**sizes))`` with random
    weights drawn after ``torch.manual_seed(seed)``, float64, eval mode."""
    with _quiet() as transformers:
        config = getattr(transformers, config_class)(**sizes)
        torch.manual_seed(seed)
        return getattr(transformers, model_class)(config).to(_F64).eval()


def norm_modules(module: nn.Module) -> list[str]:
    """Names of the normalization modules inside ``module`` (classes named ``*Norm*``)."""
    return [name for name, m in module.named_modules()
            if name and "norm" in type(m).__name__.lower()]


_SMALL = {"vocab_size": 64, "num_hidden_layers": 1, "num_attention_heads": 2}


def parallel_block_norms() -> dict[str, list[str]]:
    """Norm modules of block 0 in GPT-J (parallel, ``GPTJBlock``), GPT-NeoX with
    ``use_parallel_residual=True`` (``GPTNeoXLayer``) and GPT-2 (serial, ``GPT2Block``)."""
    gptj = tiny("GPTJModel", "GPTJConfig", vocab_size=64, n_positions=32, n_embd=16,
                n_layer=1, n_head=2, rotary_dim=4)
    neox = tiny("GPTNeoXModel", "GPTNeoXConfig", hidden_size=16, intermediate_size=32,
                use_parallel_residual=True, **_SMALL)
    gpt2 = tiny("GPT2Model", "GPT2Config", vocab_size=64, n_positions=32, n_embd=16,
                n_layer=1, n_head=2)
    return {"GPT-J": norm_modules(gptj.h[0]), "GPT-NeoX": norm_modules(neox.layers[0]),
            "GPT-2": norm_modules(gpt2.h[0])}


def tiny_gptj_block(seed: int = 0, batch: int = 2, tokens: int = 5):
    """``(block, x, position_ids)``: block 0 of a random GPT-J (``n_embd`` 16), an input
    ``x`` of shape ``(batch, tokens, 16)`` and the position ids ``(batch, tokens)``."""
    model = tiny("GPTJModel", "GPTJConfig", seed=seed, vocab_size=64, n_positions=32,
                 n_embd=16, n_layer=1, n_head=2, rotary_dim=4)
    x = torch.randn(batch, tokens, 16, dtype=_F64,
                    generator=torch.Generator().manual_seed(seed))
    return model.h[0], x, torch.arange(tokens).expand(batch, tokens)


def qk_norm_shapes() -> dict[str, dict]:
    """Gain shapes of ``q_norm`` and ``k_norm`` with 4 heads of ``head_dim`` 8 (2 key-value
    heads) in OLMo 2 (``Olmo2Attention``), Qwen3 (``Qwen3Attention``) and Gemma 3
    (``Gemma3Attention``), with the heads and head size used."""
    sizes = dict(vocab_size=64, hidden_size=32, intermediate_size=64, num_hidden_layers=1,
                 num_attention_heads=4, num_key_value_heads=2, head_dim=8, **_TOKENS)
    specs = {"OLMo 2": ("Olmo2ForCausalLM", "Olmo2Config"),
             "Qwen3": ("Qwen3ForCausalLM", "Qwen3Config"),
             "Gemma 3": ("Gemma3ForCausalLM", "Gemma3TextConfig")}
    out = {}
    for name, (model_class, config_class) in specs.items():
        attention = tiny(model_class, config_class, **sizes).model.layers[0].self_attn
        out[name] = {"q_norm": tuple(attention.q_norm.weight.shape),
                     "k_norm": tuple(attention.k_norm.weight.shape),
                     "heads": 4, "kv_heads": 2, "head_dim": 8}
    return out


def config_defaults() -> dict[str, object]:
    """The configuration classes' defaults that the answers quote (no model is built)."""
    with _quiet() as t:
        gemma2, deepseek = t.Gemma2Config(), t.DeepseekV3Config()
        return {
            "LlamaConfig().rms_norm_eps": t.LlamaConfig().rms_norm_eps,
            "Gemma2Config().attn_logit_softcapping": gemma2.attn_logit_softcapping,
            "Gemma2Config().final_logit_softcapping": gemma2.final_logit_softcapping,
            "Gemma3TextConfig().attn_logit_softcapping":
                t.Gemma3TextConfig().attn_logit_softcapping,
            "DeepseekV3Config().q_lora_rank": deepseek.q_lora_rank,
            "DeepseekV3Config().kv_lora_rank": deepseek.kv_lora_rank,
            "DeepseekV3Config().norm_topk_prob": deepseek.norm_topk_prob,
            "DeepseekV3Config().routed_scaling_factor": deepseek.routed_scaling_factor,
            "GPTJConfig().layer_norm_epsilon": t.GPTJConfig().layer_norm_epsilon,
        }


def _record_inputs(modules: dict[str, nn.Module]):
    seen: dict[str, tuple] = {}

    def hook(name):
        def record(module, args, out):
            seen.setdefault(name, (args[0].detach(), out.detach()))   # returns None
        return record

    hooks = [m.register_forward_hook(hook(name)) for name, m in modules.items()]
    return seen, hooks


def bloom_embedding_norm(seed: int = 0) -> dict:
    """One forward pass of a random BLOOM (``BloomModel``): the first normalization module
    called, and whether its input is the word embedding of the tokens."""
    model = tiny("BloomModel", "BloomConfig", seed=seed, vocab_size=64, hidden_size=16,
                 n_layer=1, n_head=2)
    order: list[str] = []
    norms = {n: m for n, m in model.named_modules() if isinstance(m, nn.LayerNorm)}
    seen, hooks = _record_inputs(norms)
    pre = [m.register_forward_pre_hook(lambda mod, args, name=n: order.append(name) or None)
           for n, m in norms.items()]
    tokens = torch.tensor([[3, 14, 15, 9, 26]])
    with torch.no_grad():
        model(tokens)
    for h in hooks + pre:
        h.remove()
    first = order[0]
    embedded = model.word_embeddings(tokens)
    return {"first_norm": first, "kind": type(norms[first]).__name__,
            "input_is_embedding": bool(torch.equal(seen[first][0], embedded)),
            "norms_in_order": order}


_DEEPSEEK = dict(vocab_size=64, hidden_size=32, intermediate_size=64,
                 moe_intermediate_size=16, num_hidden_layers=1, first_k_dense_replace=0,
                 num_attention_heads=2, num_key_value_heads=2, q_lora_rank=12,
                 kv_lora_rank=8, qk_rope_head_dim=4, qk_nope_head_dim=8, v_head_dim=8,
                 n_routed_experts=8, num_experts_per_tok=2, n_group=2, topk_group=1,
                 n_shared_experts=1, **_TOKENS)


def _deepseek(seed: int, moe: bool):
    # moe=False: block 0 is dense (float64 forward passes; torch's grouped_mm, which the
    # experts use, takes no float64); the router is then read from a MoE block
    sizes = {**_DEEPSEEK, "first_k_dense_replace": 0 if moe else 1}
    return tiny("DeepseekV3ForCausalLM", "DeepseekV3Config", seed=seed, **sizes)


def deepseek_v3_latent_norms(seed: int = 0) -> dict:
    """Trace one forward pass of a random DeepSeek-V3 (``DeepseekV3Attention``): the
    input width of ``q_a_layernorm`` and ``kv_a_layernorm`` against the hidden size and
    the latent ranks, and whether its output is ``x / rms(x) * weight`` (an RMSNorm)."""
    model = _deepseek(seed, moe=False)
    attention = model.model.layers[0].self_attn
    names = {"q_a_layernorm": attention.q_a_layernorm,
             "kv_a_layernorm": attention.kv_a_layernorm}
    seen, hooks = _record_inputs(names)
    with torch.no_grad():
        model(torch.tensor([[3, 14, 15, 9, 26]]))
    for h in hooks:
        h.remove()
    out = {"hidden_size": _DEEPSEEK["hidden_size"], "q_lora_rank": _DEEPSEEK["q_lora_rank"],
           "kv_lora_rank": _DEEPSEEK["kv_lora_rank"],
           "qk_rope_head_dim": _DEEPSEEK["qk_rope_head_dim"]}
    for name, (x, y) in seen.items():
        rms = x / x.pow(2).mean(-1, keepdim=True).add(names[name].variance_epsilon).sqrt()
        out[name] = {"input_width": x.shape[-1], "class": type(names[name]).__name__,
                     "is_rms_norm": bool(torch.allclose(y, rms * names[name].weight))}
    return out


def deepseek_v3_router(seed: int = 0, tokens: int = 4) -> dict:
    """Route ``tokens`` random hidden states through a random ``DeepseekV3TopkRouter``
    (its weight drawn from N(0, 1), as after training): sigmoid scores, the top-k weights
    and their sum per token, with ``norm_topk_prob`` as configured (True) and off."""
    router = _deepseek(seed, moe=True).model.layers[0].mlp.gate
    with torch.no_grad():
        router.weight.normal_(generator=torch.Generator().manual_seed(seed))
    h = torch.randn(tokens, _DEEPSEEK["hidden_size"], dtype=_F64,
                    generator=torch.Generator().manual_seed(seed + 1))
    out = {"routed_scaling_factor": router.routed_scaling_factor, "top_k": router.top_k}
    for flag in (True, False):
        router.norm_topk_prob = flag
        with torch.no_grad():
            logits, weights, index = router(h)
        out[f"norm_topk_prob={flag}"] = {
            "weights": weights, "index": index, "sum": weights.sum(-1),
            "scores": torch.sigmoid(logits)}
    router.norm_topk_prob = True
    return out


def softmax_routers(seed: int = 0, tokens: int = 4, experts: int = 8, top_k: int = 2
                    ) -> dict:
    """Route ``tokens`` random hidden states through ``MixtralTopKRouter`` (built from a tiny
    ``MixtralConfig``) and ``Qwen2MoeTopKRouter`` (``Qwen2MoeConfig``, whose
    ``norm_topk_prob`` defaults to False), both with the same router weights, drawn from
    N(0, 1/hidden) so that the logits are of order 1.

    Returns per router the sum of the chosen top-k weights per token (``"Mixtral"``,
    ``"Qwen2-MoE"``), ``norm_topk_prob`` (Qwen2-MoE's default), and
    ``mixtral_vs_topk_softmax``: the largest difference between Mixtral's weights and a
    softmax taken over the chosen experts' logits only (Mixtral's G = Softmax(TopK(x W)))."""
    hidden = 16
    with _quiet() as t:
        from transformers.models.mixtral.modeling_mixtral import MixtralTopKRouter
        from transformers.models.qwen2_moe.modeling_qwen2_moe import Qwen2MoeTopKRouter

        sizes = dict(hidden_size=hidden, num_experts_per_tok=top_k, **_TOKENS)
        mixtral = MixtralTopKRouter(t.MixtralConfig(num_local_experts=experts, **sizes))
        qwen_config = t.Qwen2MoeConfig(num_experts=experts, **sizes)
        qwen = Qwen2MoeTopKRouter(qwen_config)
    weight = torch.randn(experts, hidden, generator=torch.Generator().manual_seed(seed))
    weight = weight / hidden ** 0.5
    h = torch.randn(tokens, hidden, generator=torch.Generator().manual_seed(seed + 1))
    out = {"norm_topk_prob": bool(qwen_config.norm_topk_prob), "top_k": top_k,
           "experts": experts}
    for name, router in (("Mixtral", mixtral), ("Qwen2-MoE", qwen)):
        with torch.no_grad():
            router.weight.copy_(weight)
            logits, weights, index = router(h)
        out[name] = weights.sum(-1)
        if name == "Mixtral":
            chosen = torch.gather(logits.float(), -1, index).softmax(-1)
            out["mixtral_vs_topk_softmax"] = float((weights - chosen).abs().max())
    return out


def glm_norms() -> dict[str, list[str]]:
    """Norm modules of block 0 of ``GlmModel`` (GLM-4, ``GlmDecoderLayer``) and
    ``Glm4Model`` (GLM-4-0414, ``Glm4DecoderLayer``), and the configuration's eps."""
    sizes = dict(vocab_size=64, hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=8, **_TOKENS)
    glm = tiny("GlmModel", "GlmConfig", **sizes)
    glm4 = tiny("Glm4Model", "Glm4Config", **sizes)
    with _quiet() as t:
        eps = {"GlmConfig": t.GlmConfig().rms_norm_eps,
               "Glm4Config": t.Glm4Config().rms_norm_eps}
    return {"GlmModel": norm_modules(glm.layers[0]), "Glm4Model": norm_modules(glm4.layers[0]),
            "eps": eps}


def gemma3_boundary_norms(seed: int = 0) -> dict:
    """The two norms at the boundary between attention and MLP in block 0 of a tiny
    ``Gemma3ForCausalLM`` (hidden size 16): ``{"post": post_attention_layernorm, "pre":
    pre_feedforward_layernorm, "eps": ...}``. Their weights (zero at initialization, gain
    ``1 + w``) are drawn from N(0, 0.1^2) so that the gains differ."""
    model = tiny("Gemma3ForCausalLM", "Gemma3TextConfig", seed=seed, vocab_size=64,
                 hidden_size=16, intermediate_size=32, num_hidden_layers=1,
                 num_attention_heads=2, num_key_value_heads=1, head_dim=8, **_TOKENS)
    layer = model.model.layers[0]
    generator = torch.Generator().manual_seed(seed)
    with torch.no_grad():
        for norm in (layer.post_attention_layernorm, layer.pre_feedforward_layernorm):
            norm.weight.copy_(0.1 * torch.randn(norm.weight.shape, generator=generator,
                                                dtype=norm.weight.dtype))
    return {"post": layer.post_attention_layernorm, "pre": layer.pre_feedforward_layernorm,
            "eps": layer.post_attention_layernorm.eps}
