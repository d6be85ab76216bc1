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
``kbit_upcast_report(model)``
    for a ``transformers`` model quantized to 4 bits, which parameters stay unquantized
    (``get_keys_to_not_convert``, traced) and how many bytes PEFT's
    ``prepare_model_for_kbit_training`` adds by casting them from 16 to 32 bits.
``input_grad_only_step()``
    a fused RMSNorm whose backward returns a gradient for the input only (the contract of
    Unsloth's Triton kernel): its weight gets no gradient even with ``requires_grad``.
``frozen_norm_upcast()``
    ``LlamaRMSNorm`` with a bf16 checkpoint weight, and the same module with the weight
    upcast to fp32: equal values, the fp32 output rounds to the bf16 one bit for bit, and
    only its dtype differs, which the next bf16 matrix multiply refuses.

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
           "zero_lr_finetune", "kbit_upcast_report", "frozen_norm_upcast",
           "input_grad_only_step"]

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
                     freeze_bn_params: bool = False, seed: int = 0) -> dict:
    r"""Fine-tune a pretrained ``Linear -> BatchNorm1d -> ReLU -> Linear`` model (float64)
    for ``steps`` SGD steps with learning rate **0** on small batches from a new domain
    (inputs ``3 x + 2``), in training mode, with its BN either left in training mode or
    kept in evaluation mode (``keep_bn_eval``). ``freeze_bn_params`` also sets
    ``requires_grad_(False)`` on BN's weight and bias (PyTorch's way to freeze them, which
    does not touch the running statistics). Returns ``{"max_weight_change",
    "max_output_change"}``: the largest change of any parameter (0: the rate is 0) and of
    the evaluation-mode outputs on a fixed probe batch of the new domain.
    """
    model, g = _pretrained(seed)
    probe = 3 * torch.randn(32, 6, generator=g, dtype=F64) + 2
    with torch.no_grad():
        before = model(probe)
    weights = copy.deepcopy(list(model.parameters()))
    if freeze_bn_params:
        for m in model.modules():
            if isinstance(m, lnn._BatchNorm):
                m.requires_grad_(False)
    optimizer = torch.optim.SGD([p for p in model.parameters() if p.requires_grad], lr=0.0)
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


def kbit_upcast_report(model: nn.Module) -> dict:
    """What ``prepare_model_for_kbit_training`` upcasts in a 4-bit (QLoRA) model.

    ``transformers`` quantizes every ``nn.Linear`` except the modules that
    ``transformers.quantizers.base.get_keys_to_not_convert(model)`` keeps (the output
    embedding, tied weights, the last module; called here, traced); PEFT's
    ``prepare_model_for_kbit_training`` (``peft/utils/other.py``) then casts every remaining
    fp16 or bf16 parameter to fp32. ``model`` may live on the ``meta`` device. Returns
    ``{"kept": names of the kept modules, "quantized": parameters in quantized Linear
    layers, "upcast": {"norm", "embedding", "kept_linear", "other"}: parameters cast to
    fp32 by category, "extra_bytes": 2 bytes each (16 to 32 bits)}``; a tensor shared by
    two modules (tied embeddings) is counted once, under the first module that holds it.
    """
    from transformers.quantizers.base import get_keys_to_not_convert

    kept = sorted(get_keys_to_not_convert(model))
    seen: set[int] = set()
    counts = {"quantized": 0, "norm": 0, "embedding": 0, "kept_linear": 0, "other": 0}
    for name, module in model.named_modules():
        for p in module.parameters(recurse=False):
            if id(p) in seen:
                continue
            seen.add(id(p))
            if isinstance(module, nn.Linear):
                key = "kept_linear" if name in kept else "quantized"
            elif is_norm_module(module):
                key = "norm"
            elif isinstance(module, nn.Embedding):
                key = "embedding"
            else:
                key = "other"
            counts[key] += p.numel()
    upcast = {k: counts[k] for k in ("norm", "embedding", "kept_linear", "other")}
    return {"kept": kept, "quantized": counts["quantized"], "upcast": upcast,
            "extra_bytes": 2 * sum(upcast.values())}


@torch.no_grad()
def frozen_norm_upcast(hidden: int = 64, rows: int = 8, seed: int = 0) -> dict:
    """A frozen ``LlamaRMSNorm`` (``transformers``, traced) with a bf16 weight as loaded from
    a bf16 checkpoint, against the same module after ``weight.data = weight.float()`` (what
    ``prepare_model_for_kbit_training`` does), on bf16 activations. The forward computes its
    statistics in fp32 either way and casts the normalized row back to bf16 before the
    weight multiply, so the upcast changes only that product: exact in fp32 (two 8-bit
    significands), one rounding in bf16. Returns ``{"weights_equal", "dtypes": (bf16
    module's output dtype, fp32 module's), "rounded_equal": the fp32 output rounded to bf16
    equals the bf16 output bit for bit, "next_linear_error": the message of a bf16
    ``F.linear`` fed the fp32 output}``."""
    from layernorm_tutorial.lab.interview.mixed_precision_casts import traced_norm

    g = torch.Generator().manual_seed(seed)
    weight16 = (1 + 0.1 * torch.randn(hidden, generator=g)).to(torch.bfloat16)
    x = (3 * torch.randn(rows, hidden, generator=g)).to(torch.bfloat16)
    norm16 = traced_norm("LlamaRMSNorm", hidden).to(torch.bfloat16)
    norm16.weight.copy_(weight16)
    norm32 = traced_norm("LlamaRMSNorm", hidden).to(torch.bfloat16)
    norm32.weight.data = weight16.float()
    y16, y32 = norm16(x), norm32(x)
    try:
        nn.functional.linear(y32, torch.ones(4, hidden, dtype=torch.bfloat16))
        error = None
    except RuntimeError as err:
        error = str(err)
    return {"weights_equal": torch.equal(norm32.weight, weight16.float()),
            "dtypes": (y16.dtype, y32.dtype),
            "rounded_equal": torch.equal(y32.to(torch.bfloat16), y16),
            "next_linear_error": error}


class _InputGradOnlyRMSNorm(torch.autograd.Function):
    """RMSNorm whose backward returns the input's gradient and None for the weight."""

    @staticmethod
    def forward(ctx, x, weight, eps):
        rstd = torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps)
        ctx.save_for_backward(x, weight, rstd)
        return x * rstd * weight

    @staticmethod
    def backward(ctx, dy):
        x, weight, rstd = ctx.saved_tensors
        g, xhat = dy * weight, x * rstd
        dx = rstd * (g - xhat * (g * xhat).mean(-1, keepdim=True))
        return dx, None, None


def input_grad_only_step(hidden: int = 16, rows: int = 4, lr: float = 0.1,
                         seed: int = 0) -> dict:
    r"""One SGD step through an RMSNorm whose ``autograd.Function`` returns no gradient for
    its weight (``return dX, None, ...``, as the backward of Unsloth's fused kernel in
    ``unsloth/kernels/rms_layernorm.py``), with ``requires_grad=True`` on the weight
    (float64). Returns ``{"input_grad_error": max |dx - torch's rms_norm dx|, "weight_grad":
    the weight's ``.grad`` (None), "weight_moved": max |change of the weight|}``: the input
    gradient is right, the weight silently stays where it was."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(rows, hidden, generator=g, dtype=F64, requires_grad=True)
    weight = (1 + 0.1 * torch.randn(hidden, generator=g, dtype=F64)).requires_grad_(True)
    dy = torch.randn(rows, hidden, generator=g, dtype=F64)
    before = weight.detach().clone()
    (_InputGradOnlyRMSNorm.apply(x, weight, 1e-6) * dy).sum().backward()
    x_ref = x.detach().clone().requires_grad_(True)
    ref = nn.functional.rms_norm(x_ref, (hidden,), weight.detach(), eps=1e-6)
    (dx_ref,) = torch.autograd.grad((ref * dy).sum(), x_ref)
    torch.optim.SGD([weight], lr=lr).step()
    return {"input_grad_error": (x.grad - dx_ref).abs().max().item(),
            "weight_grad": weight.grad,
            "weight_moved": (weight.detach() - before).abs().max().item()}
