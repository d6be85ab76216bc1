"""LLaMA's RMSNorm epsilon by generation, read from ``transformers`` configuration classes.

Nothing is downloaded: the values are the defaults of the configuration classes installed
with ``transformers``.

``LlamaConfig``
    ``rms_norm_eps = 1e-6``: its defaults describe a LLaMA-7B-style model (the first
    generation: 32 layers, width 4096, 2,048 positions, a 32,000-token vocabulary).
``MllamaTextConfig``
    ``rms_norm_eps = 1e-5``: the text model of Llama 3.2 Vision, a Llama 3 model (a
    128,256-token vocabulary, an MLP of width 14,336, 8 key/value heads).

Llama 2 has no configuration class of its own in ``transformers`` (its checkpoints use
``LlamaConfig`` with the values of their ``config.json``); its released value, ``1e-5``, is
traced in the interview chapter, part 2.
"""

from __future__ import annotations

import warnings

__all__ = ["CLASSES", "traced_configs"]

#: configuration class -> the fields read from its defaults
CLASSES = {
    "LlamaConfig": ("rms_norm_eps", "vocab_size", "hidden_size", "intermediate_size",
                    "num_hidden_layers", "max_position_embeddings"),
    "MllamaTextConfig": ("rms_norm_eps", "vocab_size", "hidden_size", "intermediate_size",
                         "num_key_value_heads"),
}


def traced_configs() -> dict[str, dict]:
    """``{class name: {field: default}}`` for :data:`CLASSES`, from ``transformers``."""
    with warnings.catch_warnings():          # tqdm's notebook check, on first import
        warnings.filterwarnings("ignore", message="IProgress not found")
        import transformers

    out = {}
    for name, fields in CLASSES.items():
        config = getattr(transformers, name)()
        out[name] = {field: getattr(config, field) for field in fields}
    return out


def rms_norm_16_bit_eps(value: float = 0.01, width: int = 8) -> list[tuple]:
    """``torch.nn.functional.rms_norm`` with ``eps=None`` on a row of ``width`` copies of
    ``value`` in float16 and bfloat16: ``(dtype, output, what the dtype's own machine
    epsilon would give)``. The output is about 1 because torch uses float32's epsilon for
    16-bit inputs (``torch.finfo(float32).eps``), not the dtype's."""
    import torch

    row = torch.full((1, width), value)
    rows = []
    for dtype in (torch.float16, torch.bfloat16):
        y = torch.nn.functional.rms_norm(row.to(dtype), (width,))[0, 0].item()
        own = value / (value**2 + torch.finfo(dtype).eps) ** 0.5
        rows.append((dtype, y, own))
    return rows
