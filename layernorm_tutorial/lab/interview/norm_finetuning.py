r"""Fine-tuning only the normalization parameters, and what BatchNorm's statistics do
during fine-tuning.

``meta_model(model_class, config_class)``
    a ``transformers`` model built from its default configuration on the ``meta`` device:
    shapes and parameter counts, no memory, no weights.
``parameter_counts(model)``
    ``{"norm", "bias", "total"}``: parameters of the normalization modules (classes whose
    name contains ``Norm``), of all biases (what BitFit trains), and of the whole model.
``train_only_norms(model, biases=False)``
    freeze everything except the norm parameters (and every bias with ``biases=True``);
    returns the names left trainable.
``zero_lr_finetune(keep_bn_eval)``
    "fine-tune" a pretrained BN model with learning rate 0 on data from a new domain and
    return how much its evaluation-mode predictions moved: with BN in training mode the
    running statistics are overwritten, so the model changes although no weight does.

Why tuning :math:`\gamma` alone is a restricted form of full fine-tuning: a norm's output
:math:`\gamma\odot\hat x+\beta` that feeds a linear layer :math:`W` is the same as
:math:`W\,\mathrm{diag}(\gamma)\,\hat x + W\beta`, so changing :math:`\gamma` rescales the
*columns* of every matrix that reads the normalized features
(:func:`~layernorm_tutorial.lab.interview.folding.fold_affine_into_next_linear`).
"""

from __future__ import annotations

import copy
import warnings

import torch
from torch import nn

from layernorm_tutorial import nn as lnn

__all__ = ["meta_model", "is_norm_module", "parameter_counts", "train_only_norms",
           "zero_lr_finetune"]

F64 = torch.float64


def meta_model(model_class: str, config_class: str, **config) -> nn.Module:
    """``transformers.<model_class>(transformers.<config_class>(**config))`` built on the
    ``meta`` device (parameters have shapes but no storage). Importing ``transformers``
    and building the first model take seconds."""
    with warnings.catch_warnings():              # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers

    cfg = getattr(transformers, config_class)(**config)
    with torch.device("meta"):
        return getattr(transformers, model_class)(cfg)


def is_norm_module(module: nn.Module) -> bool:
    """True for normalization modules: torch's, the package's and ``transformers``' classes
    whose name contains ``Norm`` (``LayerNorm``, ``LlamaRMSNorm``, ``BatchNorm2d``, ...)."""
    return "Norm" in type(module).__name__


def parameter_counts(model: nn.Module) -> dict[str, int]:
    """``{"norm": parameters owned by norm modules, "bias": parameters whose name ends in
    "bias" (all bias vectors, norms' included), "total": all parameters}``, shared
    parameters counted once."""
    seen: set[int] = set()
    counts = {"norm": 0, "bias": 0, "total": 0}
    norm_params = {id(p) for m in model.modules() if is_norm_module(m)
                   for p in m.parameters(recurse=False)}
    for name, p in model.named_parameters():
        if id(p) in seen:
            continue
        seen.add(id(p))
        counts["total"] += p.numel()
        counts["norm"] += p.numel() if id(p) in norm_params else 0
        counts["bias"] += p.numel() if name.endswith("bias") else 0
    return counts


def train_only_norms(model: nn.Module, biases: bool = False) -> list[str]:
    """Set ``requires_grad`` so that only the parameters of norm modules (plus every bias
    when ``biases`` is True) are trained; returns their names. Running statistics are
    buffers and are not affected: see :func:`zero_lr_finetune`."""
    norm_params = {id(p) for m in model.modules() if is_norm_module(m)
                   for p in m.parameters(recurse=False)}
    trainable = []
    for name, p in model.named_parameters():
        keep = id(p) in norm_params or (biases and name.endswith("bias"))
        p.requires_grad_(keep)
        if keep:
            trainable.append(name)
    return trainable


def _pretrained(seed: int) -> tuple[nn.Module, torch.Generator]:
    g = torch.Generator().manual_seed(seed)
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(6, 16), lnn.BatchNorm1d(16), nn.ReLU(),
                          nn.Linear(16, 3)).to(F64)
    with torch.no_grad():
        for _ in range(50):                               # "pretraining" data: N(0, 1)
            model(torch.randn(64, 6, generator=g, dtype=F64))
    return model.eval(), g


def zero_lr_finetune(keep_bn_eval: bool, *, steps: int = 20, batch: int = 8,
                     seed: int = 0) -> dict:
    r"""Fine-tune a pretrained ``Linear -> BatchNorm1d -> ReLU -> Linear`` model (float64)
    for ``steps`` SGD steps with learning rate **0** on small batches from a new domain
    (inputs ``3 x + 2``), in training mode, with its BN either left in training mode or
    kept in evaluation mode (``keep_bn_eval``). Returns ``{"max_weight_change",
    "max_output_change"}``: the largest change of any parameter (0: the rate is 0) and of
    the evaluation-mode outputs on a fixed probe batch of the new domain.
    """
    model, g = _pretrained(seed)
    probe = 3 * torch.randn(32, 6, generator=g, dtype=F64) + 2
    with torch.no_grad():
        before = model(probe)
    weights = copy.deepcopy(list(model.parameters()))
    optimizer = torch.optim.SGD(model.parameters(), lr=0.0)
    model.train()
    if keep_bn_eval:
        for m in model.modules():
            if isinstance(m, lnn._BatchNorm):
                m.eval()
    for _ in range(steps):
        x = 3 * torch.randn(batch, 6, generator=g, dtype=F64) + 2
        y = torch.randint(0, 3, (batch,), generator=g)
        optimizer.zero_grad()
        nn.functional.cross_entropy(model(x), y).backward()
        optimizer.step()
    model.eval()
    with torch.no_grad():
        after = model(probe)
    return {"max_weight_change": max((p - q).abs().max().item()
                                     for p, q in zip(model.parameters(), weights, strict=True)),
            "max_output_change": (after - before).abs().max().item()}
