r"""Where the norms sit in real architectures: traced in tiny random-weight models.

Each model is built by the ``transformers`` package from a configuration object with small
sizes (hidden size 16, two layers, nothing downloaded), so the code that runs is the code of
the real model. Every normalization module gets forward hooks, and one forward pass records,
for each call in order: the module, its input and output, and which attention or MLP
sub-layer (if any) ran around it. The rows are *derived from that trace*, not from the
module names:

* **kind**: LayerNorm if adding a constant to every feature of a token leaves the output
  unchanged (the mean is subtracted), RMSNorm otherwise;
* **position**: ``inside attention (q)``/``(k)`` when called while an attention module runs
  (q or k from the name of the norm's sub-module); ``on the output of X`` when the norm's
  input equals the output of sub-layer X (the branch is normalized before the residual
  add: Gemma 3's and OLMo 2's post-norms); ``before X`` when its output is the input of
  the next sub-layer X and the residual add uses the norm's *input* (pre-norm);
  ``after X + residual`` when the norm's output becomes the residual stream (post-norm);
  ``embeddings`` and ``final`` outside the blocks;
* **parameters**: the names and shapes of the module's own parameters, and ``gamma = 1 + w``
  when a zero weight still gives a unit gain (Gemma's convention);
* **eps** as stored on the module.

Importing ``transformers`` takes many seconds, so the book stores the rows
(:mod:`layernorm_tutorial.lab.large_models.__main__`).
"""

from __future__ import annotations

import re

import torch
from torch import nn

__all__ = ["MODEL_SPECS", "build_model", "trace_norms", "norm_parameter_counts",
           "default_config_counts",
           "architecture_table"]

# model name -> (config class, model class, config kwargs, attention classes, MLP classes)
_COMMON = {"vocab_size": 64, "hidden_size": 16, "intermediate_size": 32,
           "num_hidden_layers": 2, "num_attention_heads": 2, "num_key_value_heads": 1,
           "max_position_embeddings": 32}
MODEL_SPECS = {
    "GPT-2": ("GPT2Config", "GPT2Model",
              {"vocab_size": 64, "n_positions": 32, "n_embd": 16, "n_layer": 2, "n_head": 2},
              ("GPT2Attention",), ("GPT2MLP",)),
    "BERT": ("BertConfig", "BertModel",
             {"vocab_size": 64, "hidden_size": 16, "num_hidden_layers": 2,
              "num_attention_heads": 2, "intermediate_size": 32, "max_position_embeddings": 32},
             ("BertSelfAttention",), ("BertIntermediate",)),
    "T5": ("T5Config", "T5Model",
           {"vocab_size": 64, "d_model": 16, "d_kv": 8, "d_ff": 32, "num_layers": 2,
            "num_decoder_layers": 2, "num_heads": 2},
           ("T5Attention",), ("T5DenseActDense",)),
    "LLaMA": ("LlamaConfig", "LlamaForCausalLM", dict(_COMMON), ("LlamaAttention",),
              ("LlamaMLP",)),
    "Qwen3": ("Qwen3Config", "Qwen3ForCausalLM", {**_COMMON, "head_dim": 8},
              ("Qwen3Attention",), ("Qwen3MLP",)),
    "OLMo 2": ("Olmo2Config", "Olmo2ForCausalLM", dict(_COMMON), ("Olmo2Attention",),
               ("Olmo2MLP",)),
    "Gemma 3": ("Gemma3TextConfig", "Gemma3ForCausalLM", {**_COMMON, "head_dim": 8},
                ("Gemma3Attention",), ("Gemma3MLP",)),
}
_BLOCK = re.compile(r"(^|\.)(h|layer|block|layers)\.(\d+)$")
_SUBLAYERS = ("attention", "cross-attention", "MLP")
_ENTER = tuple(f"enter {s}" for s in _SUBLAYERS)
_EXIT = tuple(f"exit {s}" for s in _SUBLAYERS)


def _outermost_blocks(names) -> set:
    """Block names (``...h.3``, ``...layers.0``) that sit inside no other block."""
    matched = [n for n in names if _BLOCK.search(n)]
    return {n for n in matched if not any(n.startswith(m + ".") for m in matched)}


def _is_norm(module: nn.Module) -> bool:
    return "norm" in type(module).__name__.lower()


def build_model(name: str, seed: int = 0) -> nn.Module:
    """The tiny random-weight model of :data:`MODEL_SPECS` (eval mode, float32)."""
    import transformers

    config_cls, model_cls, kwargs, _, _ = MODEL_SPECS[name]
    torch.manual_seed(seed)
    config = getattr(transformers, config_cls)(**kwargs)
    return getattr(transformers, model_cls)(config).eval()


def _first_tensor(value):
    if isinstance(value, torch.Tensor):
        return value
    if isinstance(value, (tuple, list)) and value and isinstance(value[0], torch.Tensor):
        return value[0]
    return None


def _same(a, b) -> bool:
    return (a is not None and b is not None and a.shape == b.shape
            and torch.allclose(a, b, rtol=1e-4, atol=1e-5))


def _kind(module: nn.Module, x: torch.Tensor) -> str:
    """LayerNorm if shifting a token by a constant does not change the output."""
    with torch.no_grad():
        y0, y1 = module(x), module(x + 3.0)
    return "LayerNorm" if torch.allclose(y0, y1, atol=1e-4) else "RMSNorm"


def _inputs(name: str) -> dict:
    g = torch.Generator().manual_seed(1)
    ids = torch.randint(0, 64, (2, 6), generator=g)
    if name == "T5":
        return {"input_ids": ids, "decoder_input_ids": ids[:, :4]}
    return {"input_ids": ids}


def trace_norms(name: str, model: nn.Module | None = None) -> list[dict]:
    """One forward pass with hooks; one row per norm module, in call order (see the module
    docstring): ``module``, ``block``, ``kind``, ``position``, ``parameters``, ``eps``."""
    model = model if model is not None else build_model(name)
    _, _, _, attention_types, mlp_types = MODEL_SPECS[name]
    events = []
    handles = []

    def sub_kind(module):
        t = type(module).__name__
        return "attention" if t in attention_types else "MLP" if t in mlp_types else None

    blocks = _outermost_blocks(n for n, _ in model.named_modules())
    for mod_name, module in model.named_modules():
        kind = sub_kind(module)
        if kind == "attention" and "EncDec" in mod_name:
            kind = "cross-attention"
        if _is_norm(module):
            handles.append(module.register_forward_hook(
                lambda m, i, o, n=mod_name: events.append(("norm", n, i[0].detach(),
                                                           _first_tensor(o).detach()))))
        elif kind or mod_name in blocks:
            tag = kind or "block"
            handles.append(module.register_forward_pre_hook(
                lambda m, args, kwargs, n=mod_name, t=tag: events.append(
                    (f"enter {t}", n, _first_tensor(args) if args else
                     _first_tensor(kwargs.get("hidden_states")), None)), with_kwargs=True))
            handles.append(module.register_forward_hook(
                lambda m, i, o, n=mod_name, t=tag: events.append(
                    (f"exit {t}", n, None, _first_tensor(o)))))
    with torch.no_grad():
        model(**_inputs(name))
    for h in handles:
        h.remove()
    modules = dict(model.named_modules())
    rows = []
    for index, (event, mod_name, x, y) in enumerate(events):
        if event != "norm":
            continue
        rows.append(_classify(events, index, mod_name, modules[mod_name], x, y))
    return rows


def _classify(events, index, mod_name, module, x, y) -> dict:
    before, after = events[:index], events[index + 1:]
    open_subs = []
    for ev, n, _, _ in before:
        if ev in _ENTER:
            open_subs.append(n)
        elif ev in _EXIT and n in open_subs:
            open_subs.remove(n)
    block = next((n for ev, n, _, _ in reversed(before) if ev == "enter block"), None)
    block_open = block is not None and not any(ev == "exit block" and n == block
                                               for ev, n, _, _ in before)
    if open_subs:
        which = "q" if "q_" in mod_name.split(".")[-1] else "k"
        position = f"inside attention ({which})"
    elif not block_open:
        first_block = any(ev == "enter block" for ev, *_ in after) and \
            not any(ev == "enter block" for ev, *_ in before)
        position = "embeddings" if first_block else "final"
    else:
        prev = next(((ev[5:], o) for ev, n, _, o in reversed(before)
                     if ev in _EXIT and n.startswith(block)), None)
        nxt = next(((ev[6:], i) for ev, n, i, _ in after if ev in _ENTER), None)
        later = [i for ev, _, i, _ in after if ev == "norm"] + \
                [o for ev, n, _, o in after if ev == "exit block"]
        if prev is not None and _same(x, prev[1]):
            position = f"on the output of {prev[0]}"
        elif nxt is not None and nxt[0] and _same(y, nxt[1]) and _pre_norm(x, nxt, after,
                                                                          later):
            position = f"before {nxt[0]}"
        elif prev is not None:
            position = f"after {prev[0]} + residual"
        else:
            position = "before the first sub-layer"
    params = {n: list(p.shape) for n, p in module.named_parameters(recurse=False)}
    eps = getattr(module, "eps", getattr(module, "variance_epsilon", None))
    return {"module": mod_name, "block": block if block_open else None,
            "kind": _kind(module, x), "position": position, "parameters": params,
            "gain": _gain_convention(module, x), "eps": float(eps) if eps is not None else None}


def _pre_norm(x, nxt, after, later) -> bool:
    """Pre-norm: the stream after the next sub-layer is ``x + branch`` (the residual add uses
    the norm's *input*); the branch is the sub-layer's output or a norm applied to it."""
    outputs = [o for ev, _, _, o in after if ev.startswith("exit ") and o is not None]
    outputs += [o for ev, _, i, o in after if ev == "norm"]
    return any(_same(x + o, t) for o in outputs if o.shape == x.shape for t in later)


def _gain_convention(module: nn.Module, x: torch.Tensor) -> str:
    """``gamma`` or ``1 + gamma``: which weight value gives a unit gain."""
    weight = getattr(module, "weight", None)
    if weight is None:
        return "none"
    saved = weight.detach().clone()
    with torch.no_grad():
        weight.zero_()
        zero_out = module(x)
        weight.copy_(saved)
    return "1 + w" if float(zero_out.abs().max()) > 1e-3 else "w"


def norm_parameter_counts(model: nn.Module) -> dict:
    """Norm parameters per block (``{block name: count}``), outside blocks, in all, and the
    model's total parameter count."""
    per_block, outside, total_norm = {}, 0, 0
    blocks = _outermost_blocks(n for n, _ in model.named_modules())
    for mod_name, module in model.named_modules():
        if not _is_norm(module):
            continue
        count = sum(p.numel() for p in module.parameters(recurse=False))
        total_norm += count
        block = next((b for b in blocks if mod_name.startswith(b + ".")), None)
        if block is None:
            outside += count
        else:
            per_block[block] = per_block.get(block, 0) + count
    return {"per_block": per_block, "outside_blocks": outside, "norm_total": total_norm,
            "model_total": sum(p.numel() for p in model.parameters())}


def architecture_table(names=None) -> dict:
    """``{model: {"rows": trace_norms(...), "counts": norm_parameter_counts(...),
    "config": kwargs}}`` for every model of :data:`MODEL_SPECS` (or ``names``)."""
    out = {}
    for name in names or MODEL_SPECS:
        model = build_model(name)
        out[name] = {"rows": trace_norms(name, model), "counts": norm_parameter_counts(model),
                     "config": MODEL_SPECS[name][2]}
    return out


def default_config_counts(name: str) -> dict:
    """Norm and model parameter counts of the model built from its configuration class's
    *default* arguments (full size), on the ``meta`` device: shapes only, no memory, no
    download. Returns hidden size, layer count, ``norm_total``, ``model_total``, and the
    norm parameters of one block."""
    import transformers

    config_cls, model_cls, _, _, _ = MODEL_SPECS[name]
    config = getattr(transformers, config_cls)()
    with torch.device("meta"):
        model = getattr(transformers, model_cls)(config)
    counts = norm_parameter_counts(model)
    hidden = getattr(config, "hidden_size", None) or getattr(config, "n_embd", None) or \
        getattr(config, "d_model", None)
    layers = getattr(config, "num_hidden_layers", None) or getattr(config, "n_layer", None) or \
        getattr(config, "num_layers", None)
    first_block = next(iter(counts["per_block"].values()), 0)
    return {"hidden_size": int(hidden), "layers": int(layers), "norm_total": counts["norm_total"],
            "model_total": counts["model_total"], "per_block": first_block}
