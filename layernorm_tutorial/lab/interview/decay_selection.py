r"""Which parameters a training recipe exempts from weight decay, rule by rule.

Codebases select the no-decay parameters in one of four ways, and they disagree on models
whose norm is a custom class or whose residual branches carry learned gains:

``by_dimension``    every tensor with fewer than 2 dimensions (nanoGPT's
                    ``configure_optimizers``; timm's ``param_groups_weight_decay`` adds names
                    ending in ``.bias``, which are 1-D anyway): gains, biases, ReZero's
                    scalar and LayerScale's vector, whatever class holds them
``by_module_type``  the parameters of modules of the listed types (``nn.LayerNorm`` by
                    default) and every parameter whose name ends in ``bias`` (the Hugging Face
                    Trainer before its name patterns): a custom RMSNorm class is missed
``by_whitelist``    minGPT's rule: biases exempt, ``nn.Linear`` weights decayed,
                    ``nn.LayerNorm`` and ``nn.Embedding`` weights exempt, and any other
                    parameter an error (minGPT asserts that every parameter was placed)
``by_transformers_trainer``  what ``transformers.Trainer.get_decay_parameter_names`` of the
                    installed version leaves out (traced, not re-implemented)

:class:`GainModel` is a small model with one of each kind of parameter.
"""

from __future__ import annotations

import torch
from torch import nn

__all__ = ["CustomRMSNorm", "GainModel", "by_dimension", "by_module_type", "by_whitelist",
           "by_transformers_trainer", "no_decay_sets"]


class CustomRMSNorm(nn.Module):
    """An RMSNorm written from scratch, as LLaMA's reference code and many models do:
    ``y = x / sqrt(mean(x^2) + eps) * weight`` over the last dimension; not an
    ``nn.LayerNorm`` (nor an ``nn.RMSNorm``)."""

    def __init__(self, dim: int, eps: float = 1e-6):
        super().__init__()
        self.eps = eps
        self.weight = nn.Parameter(torch.ones(dim))

    def forward(self, x: torch.Tensor) -> torch.Tensor:
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


class GainModel(nn.Module):
    """Token ids ``(B, T)`` -> logits ``(B, T, vocab)``: an embedding ``wte``, a custom RMSNorm
    named ``ln_1`` (GPT-2's name for a block's first norm), a linear branch gated by a ReZero
    scalar ``resweight`` (initialized to 0) and a LayerScale vector ``layer_scale``, an
    ``nn.LayerNorm`` ``ln_f`` and a bias-free head."""

    def __init__(self, vocab: int = 16, dim: int = 8):
        super().__init__()
        self.wte = nn.Embedding(vocab, dim)
        self.ln_1 = CustomRMSNorm(dim)
        self.branch = nn.Linear(dim, dim)
        self.resweight = nn.Parameter(torch.zeros(()))          # ReZero's alpha
        self.layer_scale = nn.Parameter(torch.full((dim,), 0.1))  # LayerScale's lambda
        self.ln_f = nn.LayerNorm(dim)
        self.head = nn.Linear(dim, vocab, bias=False)

    def forward(self, ids: torch.Tensor) -> torch.Tensor:
        h = self.wte(ids)
        h = h + self.resweight * self.layer_scale * self.branch(self.ln_1(h))
        return self.head(self.ln_f(h))


def _names(model: nn.Module) -> list[str]:
    if not isinstance(model, nn.Module):
        raise TypeError(f"model must be a torch.nn.Module, got {type(model).__name__}")
    return [n for n, _ in model.named_parameters()]


def by_dimension(model: nn.Module) -> set[str]:
    """Names of the parameters with ``ndim < 2`` (exempt from decay by nanoGPT's rule)."""
    _names(model)
    return {n for n, p in model.named_parameters() if p.ndim < 2}


def by_module_type(model: nn.Module, types: tuple[type, ...] = (nn.LayerNorm,)) -> set[str]:
    """Names of the parameters held by modules of ``types``, plus every name ending in
    ``bias``."""
    _names(model)
    out = set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if isinstance(module, types) or name.endswith("bias"):
                out.add(full)
    return out


def by_whitelist(model: nn.Module) -> set[str]:
    """minGPT's split: biases and the weights of ``nn.LayerNorm``/``nn.Embedding`` are exempt,
    ``nn.Linear`` weights decay. Raises ``ValueError`` naming the first parameter that fits
    neither list (minGPT stops on an assertion there)."""
    _names(model)
    exempt, decayed = set(), set()
    for module_name, module in model.named_modules():
        for name, _ in module.named_parameters(recurse=False):
            full = f"{module_name}.{name}" if module_name else name
            if name.endswith("bias"):
                exempt.add(full)
            elif name.endswith("weight") and isinstance(module, nn.Linear):
                decayed.add(full)
            elif name.endswith("weight") and isinstance(module, (nn.LayerNorm, nn.Embedding)):
                exempt.add(full)
    unplaced = [n for n in _names(model) if n not in exempt | decayed]
    if unplaced:
        raise ValueError(f"parameter {unplaced[0]!r} is in neither the decay nor the no-decay "
                         "list (minGPT's rule knows Linear, LayerNorm and Embedding only)")
    return exempt


def by_transformers_trainer(model: nn.Module) -> set[str]:
    """Names that ``transformers.Trainer.get_decay_parameter_names`` (the installed version)
    does not decay. The method reads no trainer state, so it is called unbound."""
    names = _names(model)
    from transformers import Trainer

    decayed = set(Trainer.get_decay_parameter_names(None, model))
    return {n for n in names if n not in decayed}


def no_decay_sets(model: nn.Module) -> dict[str, set[str] | str]:
    """``{rule: exempt names}`` for the four rules; minGPT's entry is its error message when
    it refuses the model."""
    out: dict[str, set[str] | str] = {
        "ndim < 2 (nanoGPT)": by_dimension(model),
        "type nn.LayerNorm + bias": by_module_type(model),
    }
    try:
        out["whitelist (minGPT)"] = by_whitelist(model)
    except ValueError as error:
        out["whitelist (minGPT)"] = str(error)
    out["transformers Trainer"] = by_transformers_trainer(model)
    return out
