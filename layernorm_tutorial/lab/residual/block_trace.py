"""Record the order in which a module's sub-layers run, with forward hooks.

Used by the residual chapter to show where the norms sit in a real block, for instance
``torch.nn.TransformerEncoderLayer(norm_first=False)`` (post-LN) against ``norm_first=True``
(pre-LN), without reading its source: the hooks see what actually runs.
"""

from __future__ import annotations

from torch import nn

__all__ = ["call_order"]


def call_order(module: nn.Module, *inputs, kinds: tuple[type, ...] | None = None,
               **kwargs) -> list[str]:
    """Run ``module(*inputs, **kwargs)`` once and return the names of the sub-modules called.

    With ``kinds=None`` every leaf sub-module (one without children) is watched; otherwise
    every sub-module whose type is one of ``kinds`` and that is not inside another watched
    one (so ``nn.MultiheadAttention`` counts once, not through its ``out_proj``). Names are
    recorded in the order their ``forward`` starts; a module called twice appears twice.
    The hooks are removed before returning, also when the forward raises.
    """
    if not isinstance(module, nn.Module):
        raise TypeError(f"module must be a torch.nn.Module, got {type(module).__name__}")
    watched: list[tuple[str, nn.Module]] = []
    for name, sub in module.named_modules():
        if not name or any(name.startswith(outer + ".") for outer, _ in watched):
            continue
        is_leaf = not any(True for _ in sub.children())
        if (is_leaf if kinds is None else isinstance(sub, kinds)):
            watched.append((name, sub))
    order: list[str] = []
    handles = [sub.register_forward_pre_hook(lambda _mod, _args, name=name: order.append(name))
               for name, sub in watched]
    try:
        module(*inputs, **kwargs)
    finally:
        for handle in handles:
            handle.remove()
    return order
