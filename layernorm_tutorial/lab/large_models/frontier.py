r"""The chapter's frontier sections, each a small mechanism that a cell asserts.

- :func:`logit_tools_check`: soft-capping bounds a logit by its cap; the z-loss gradient
  of :class:`~.qk_norm.ZLoss` equals autograd's gradient of cross-entropy + z-loss;
  QK-Clip brings a clipped head's largest logit on the same input to exactly ``tau``.
- :func:`mla_norm_trace`: DeepSeek-V3's norms on the compressed query and key-value
  latents (``q_a_layernorm``, ``kv_a_layernorm`` in
  ``transformers.models.deepseek_v3.modeling_deepseek_v3.DeepseekV3Attention``) and how its
  router (``DeepseekV3TopkRouter``) normalizes the scores of the chosen experts, traced in
  a tiny random-weight model built from ``DeepseekV3Config``.
- :func:`depth_growth`: the residual stream's scale against depth at initialization, for
  pre-LN, pre-LN with LayerNorm scaling (the norm's output times :math:`1/\sqrt{\ell}`),
  Peri-LN (a norm before *and* on the output of each branch) and Mix-LN (post-LN in the
  first quarter of the blocks, pre-LN after), in float64, with PyTorch's default branch
  init or with unit-gain branches (the ordering of the placements differs).
- :func:`ngpt_check`: nGPT's hypersphere update
  :math:`h \leftarrow \mathrm{Norm}(h + \alpha\,(\mathrm{Norm}(B(h)) - h))` with
  unit-norm weight rows: every hidden state stays on the unit sphere and every output
  logit is a cosine times a scale.
"""

from __future__ import annotations

import math

import torch
import torch.nn.functional as TF
from torch import nn

from layernorm_tutorial.lab.large_models.qk_norm import QKTransformer, ZLoss, qk_clip

__all__ = ["logit_tools_check", "mla_norm_trace", "MLA_TINY", "depth_growth",
           "DEPTH_VARIANTS", "BRANCH_INITS", "ngpt_check", "NGPTBlock", "unit_rows"]


# ------------------------------------------------------------------ logit-stability tools
def logit_tools_check(seed: int = 0) -> dict:
    """The three mechanisms on float64 tensors. Returns ``softcap_max`` (largest
    ``|c tanh(z/c)|`` for logits up to 1e4 with ``c = 50``), ``zloss_grad_error`` (largest
    difference between :class:`ZLoss`'s gradient and autograd's gradient of
    ``CE + coef * mean(logsumexp^2)``), ``clip_before``/``clip_after`` (largest logit of
    the clipped head before and after :func:`qk_clip`, same input) and ``tau``."""
    g = torch.Generator().manual_seed(seed)
    z = torch.linspace(-1e4, 1e4, 2001, dtype=torch.float64)
    cap = 50.0
    softcap_max = float((cap * torch.tanh(z / cap)).abs().max())

    logits = torch.randn(4, 6, 16, generator=g, dtype=torch.float64) * 5
    target = torch.randint(0, 16, (4, 6), generator=g)
    coef = 1e-2
    a = logits.clone().requires_grad_(True)
    TF.cross_entropy(ZLoss.apply(a, coef).reshape(-1, 16), target.reshape(-1)).backward()
    b = logits.clone().requires_grad_(True)
    lse = torch.logsumexp(b, -1)
    (TF.cross_entropy(b.reshape(-1, 16), target.reshape(-1))
     + coef * (lse ** 2).mean()).backward()
    zloss_err = float((a.grad - b.grad).abs().max())

    torch.manual_seed(seed)
    model = QKTransformer(d_model=16, nhead=2, dim_feedforward=16,
                          qk_clip_tau=1.0).double()
    with torch.no_grad():
        model.blocks[0].attn.qkv.weight.mul_(8.0)      # large logits in block 0
    tokens = torch.randint(0, 16, (4, 8), generator=g)
    model(tokens)
    before = float(model.blocks[0].attn.last_logits.amax())
    tau = before / 4
    qk_clip(model, tau)
    model(tokens)
    after = float(model.blocks[0].attn.last_logits.amax())
    return {"softcap_max": softcap_max, "cap": cap, "zloss_grad_error": zloss_err,
            "clip_before": before, "clip_after": after, "tau": tau}


# ------------------------------------------------------------------ MLA and MoE norms
#: A tiny DeepSeek-V3: hidden 32, ranks 24 (q) and 16 (kv), 8 routed experts, top 2.
MLA_TINY = {"vocab_size": 64, "hidden_size": 32, "intermediate_size": 64,
            "moe_intermediate_size": 16, "num_hidden_layers": 2, "num_attention_heads": 4,
            "num_key_value_heads": 4, "q_lora_rank": 24, "kv_lora_rank": 16,
            "qk_rope_head_dim": 4, "qk_nope_head_dim": 8, "v_head_dim": 8,
            "n_routed_experts": 8, "num_experts_per_tok": 2, "n_group": 2,
            "topk_group": 1, "first_k_dense_replace": 1, "n_shared_experts": 1}


def mla_norm_trace(seed: int = 0) -> dict:
    """Trace the latent norms and the router of a tiny ``DeepseekV3ForCausalLM``.

    Returns ``norms``: one row per norm module of block 1 (name, class, width, what feeds
    it, what reads it, whether adding a constant to a token changes its output: RMSNorm);
    ``default``: the default configuration's hidden size and the two latent ranks;
    ``router``: the router's score function on a random batch (scores in (0, 1), their sum
    over all experts, the chosen experts' weights summed per token, and
    ``routed_scaling_factor``)."""
    import warnings

    with warnings.catch_warnings():  # tqdm's notebook warning names a site-packages path
        warnings.filterwarnings("ignore", message="IProgress not found")
        from transformers import DeepseekV3Config, DeepseekV3ForCausalLM

    torch.manual_seed(seed)
    config = DeepseekV3Config(**MLA_TINY)
    model = DeepseekV3ForCausalLM(config).eval()
    attn = model.model.layers[1].self_attn
    seen = {}
    feeds = {"q_a_layernorm": ("q_a_proj", "q_b_proj"),
             "kv_a_layernorm": ("kv_a_proj_with_mqa", "kv_b_proj")}
    hooks = [getattr(attn, name).register_forward_hook(
        lambda mod, inp, out, name=name: seen.__setitem__(name, (inp[0], out)))
        for name in feeds]
    tokens = torch.randint(0, config.vocab_size, (2, 6),
                           generator=torch.Generator().manual_seed(seed))
    with torch.no_grad():
        model(tokens)
    for h in hooks:
        h.remove()
    rows = []
    for name, (source, reader) in feeds.items():
        x, y = seen[name]
        module = getattr(attn, name)
        with torch.no_grad():
            shifted = module(x + 3.0)
        rows.append({"module": f"model.layers.1.self_attn.{name}",
                     "class": type(module).__name__, "width": int(y.shape[-1]),
                     "input_from": source, "output_to": reader,
                     "subtracts_mean": bool(torch.allclose(shifted, y, atol=1e-5))})
    default = DeepseekV3Config()
    router = model.model.layers[1].mlp.gate
    hidden = torch.randn(16, config.hidden_size, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        logits, weights, _ = router(hidden)
    scores = logits.sigmoid()
    return {"norms": rows,
            "default": {"hidden_size": default.hidden_size,
                        "q_lora_rank": default.q_lora_rank,
                        "kv_lora_rank": default.kv_lora_rank,
                        "norm_topk_prob": default.norm_topk_prob,
                        "routed_scaling_factor": default.routed_scaling_factor},
            "router": {"class": type(router).__name__,
                       "scores_min": float(scores.min()), "scores_max": float(scores.max()),
                       "scores_sum_per_token": [float(s) for s in scores.sum(-1)[:3]],
                       "chosen_sum_per_token": [float(s) for s in weights.sum(-1)],
                       "routed_scaling_factor": float(config.routed_scaling_factor),
                       "top_k": int(config.num_experts_per_tok)}}


# ------------------------------------------------------------------ Pre-LN's depth
DEPTH_VARIANTS = ("pre-LN", "pre-LN + LN scaling", "Peri-LN", "Mix-LN")


class _Branch(nn.Module):
    def __init__(self, d: int):
        super().__init__()
        self.up, self.down = nn.Linear(d, 4 * d), nn.Linear(4 * d, d)

    def forward(self, x):
        return self.down(TF.gelu(self.up(x)))


#: The branch initializations of :func:`depth_growth`.
BRANCH_INITS = ("default", "unit")


def depth_growth(variant: str, num_layers: int = 48, d: int = 64, tokens: int = 256,
                 seed: int = 0, branch_init: str = "default") -> dict:
    r"""Stream statistics after every block of a ``num_layers`` stack of MLP branches at
    initialization (float64, input of unit variance).

    ``branch_init``: ``"default"``, PyTorch's default ``nn.Linear`` init (uniform with
    bound :math:`1/\sqrt{\text{fan-in}}`: a branch's output starts at about a fifth of a
    unit-variance input's scale); ``"unit"``, the same weights with each branch's output
    layer rescaled so that the branch maps a standard-normal input to an output of unit
    standard deviation (a unit-gain branch). The ordering of the placements depends on it.

    ``pre-LN``: :math:`x + F(\mathrm{LN}(x))`; ``pre-LN + LN scaling``:
    :math:`x + F(\mathrm{LN}(x)/\sqrt{\ell})` (Sun et al. 2025); ``Peri-LN``:
    :math:`x + \mathrm{LN}(F(\mathrm{LN}(x)))`; ``Mix-LN``: post-LN,
    :math:`\mathrm{LN}(x + F(x))`, in the first quarter of the blocks, pre-LN after (Li et
    al. 2024, their ratio 0.25). Returns ``std`` (of the stream after block
    :math:`\ell`, one per block) and ``relative_update``
    (:math:`\|\text{branch}\| / \|x\|` of each block: how much it moves the stream)."""
    if variant not in DEPTH_VARIANTS:
        raise ValueError(f"variant must be one of {DEPTH_VARIANTS}, got {variant!r}")
    if branch_init not in BRANCH_INITS:
        raise ValueError(f"branch_init must be one of {BRANCH_INITS}, got {branch_init!r}")
    torch.manual_seed(seed)
    branches = [_Branch(d).double() for _ in range(num_layers)]
    if branch_init == "unit":
        probe = torch.randn(tokens, d, generator=torch.Generator().manual_seed(seed + 2),
                            dtype=torch.float64)
        with torch.no_grad():
            for branch in branches:
                scale = float(branch(probe).std())
                branch.down.weight.div_(scale)
                branch.down.bias.div_(scale)
    x = torch.randn(tokens, d, generator=torch.Generator().manual_seed(seed + 1),
                    dtype=torch.float64)
    ln = lambda t: TF.layer_norm(t, (d,))  # noqa: E731 - one line, no parameters
    post_blocks = num_layers // 4 if variant == "Mix-LN" else 0
    std, rel = [], []
    with torch.no_grad():
        for ell, branch in enumerate(branches, start=1):
            if ell <= post_blocks:
                out = branch(x)
                rel.append(float(out.norm() / x.norm()))
                x = ln(x + out)
            else:
                scale = 1 / math.sqrt(ell) if variant == "pre-LN + LN scaling" else 1.0
                out = branch(ln(x) * scale)
                if variant == "Peri-LN":
                    out = ln(out)
                rel.append(float(out.norm() / x.norm()))
                x = x + out
            std.append(float(x.std()))
    return {"variant": variant, "std": std, "relative_update": rel,
            "branch_init": branch_init}


# ------------------------------------------------------------------ nGPT
def unit_rows(weight: torch.Tensor) -> torch.Tensor:
    """``weight`` with every row (the vectors along the embedding dimension, for a
    ``(d_out, d_in)`` matrix that reads a ``d_in``-wide hidden state) of unit L2 norm."""
    return weight / weight.norm(dim=-1, keepdim=True)


class NGPTBlock(nn.Module):
    r"""An nGPT-style MLP block on the unit sphere: the branch's matrices have unit rows
    (``up``: rows along the input; ``down``: stored transposed, rows along the output) and
    the update is :math:`h \leftarrow \mathrm{Norm}(h + \alpha \odot (\mathrm{Norm}(B(h))
    - h))` with a learned per-dimension step :math:`\alpha` ("eigen learning rate")."""

    def __init__(self, d: int, alpha_init: float = 0.05):
        super().__init__()
        self.up = nn.Parameter(unit_rows(torch.randn(4 * d, d)))
        self.down_t = nn.Parameter(unit_rows(torch.randn(d, 4 * d).T.contiguous()))
        self.alpha = nn.Parameter(torch.full((d,), alpha_init))

    def normalize_(self) -> None:
        """Put the weight rows back on the sphere (nGPT does this after every step)."""
        with torch.no_grad():
            self.up.copy_(unit_rows(self.up))
            self.down_t.copy_(unit_rows(self.down_t))

    def forward(self, h: torch.Tensor) -> torch.Tensor:
        branch = TF.silu(h @ self.up.T) @ self.down_t
        target = TF.normalize(branch, dim=-1)
        return TF.normalize(h + self.alpha * (target - h), dim=-1)


def ngpt_check(num_layers: int = 8, d: int = 32, vocab: int = 16, steps: int = 3,
               seed: int = 0) -> dict:
    """Embeddings, ``num_layers`` :class:`NGPTBlock` s and logits ``s_z * (E h)`` (E with
    unit rows), trained ``steps`` AdamW steps on random targets with the weights put back
    on the sphere after each step, in float64. Returns the largest deviation of any hidden
    state's norm from 1 (every layer, after training), of any weight row's norm from 1,
    the largest ``|E h|`` (a cosine: at most 1) and, for contrast, the stream norm of a
    pre-LN stack of the same depth (it grows with depth)."""
    torch.manual_seed(seed)
    embed = nn.Parameter(unit_rows(torch.randn(vocab, d)).double())
    blocks = nn.ModuleList(NGPTBlock(d) for _ in range(num_layers)).double()
    s_z = nn.Parameter(torch.ones(vocab, dtype=torch.float64))
    opt = torch.optim.AdamW([embed, s_z, *blocks.parameters()], lr=1e-2, weight_decay=0.0)
    g = torch.Generator().manual_seed(seed + 1)
    tokens = torch.randint(0, vocab, (8, 6), generator=g)
    targets = torch.randint(0, vocab, (8, 6), generator=g)

    def forward():
        h = embed[tokens]
        states = [h]
        for block in blocks:
            h = block(h)
            states.append(h)
        return s_z * (h @ embed.T), h @ embed.T, states

    for _ in range(steps):
        logits, _, _ = forward()
        loss = TF.cross_entropy(logits.reshape(-1, vocab), targets.reshape(-1))
        opt.zero_grad()
        loss.backward()
        opt.step()
        with torch.no_grad():
            embed.copy_(unit_rows(embed))
        for block in blocks:
            block.normalize_()
    with torch.no_grad():
        _, cosines, states = forward()
        state_dev = max(float((s.norm(dim=-1) - 1).abs().max()) for s in states)
        rows = [embed] + [w for b in blocks for w in (b.up, b.down_t)]
        row_dev = max(float((w.norm(dim=-1) - 1).abs().max()) for w in rows)
    pre = depth_growth("pre-LN", num_layers=num_layers, d=d, seed=seed)
    return {"state_norm_deviation": state_dev, "weight_row_deviation": row_dev,
            "max_cosine": float(cosines.abs().max()), "steps": steps,
            "num_layers": num_layers,
            "pre_ln_stream_norm": [s * math.sqrt(d) for s in pre["std"]]}
