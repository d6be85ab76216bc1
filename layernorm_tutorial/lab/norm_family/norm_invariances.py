r"""What two family members are blind to: an image's style (instance norm), the batch (group norm).

Two uses of the family named in the normalization-family chapter, each reduced to the
property that motivates it:

* **Instance norm for style transfer.** Give every image of a batch its own per-channel
  contrast and colour offset, :math:`x'_{n,c} = a_{n,c}\,x_{n,c} + b_{n,c}` with
  :math:`a_{n,c} > 0` (``apply_style``). Instance norm's statistics are per image and per
  channel, so it returns the same output for :math:`x` and :math:`x'` (up to
  :math:`\epsilon`); batch, layer and group norm (with fewer groups than channels) mix
  channels or images and do not (``style_gaps``).
* **Group norm for small-batch detection.** A sample's group-norm output is computed from
  that sample alone, so it is the same whether the sample arrives alone or in a batch of 32;
  batch norm's training-mode output changes with the batch (``batch_size_gaps``). At batch
  size 1 batch norm's statistics run over the positions of the one image: it computes
  instance norm.

All normalizations are the package's ``functional`` ones, without affine parameters.
"""

from __future__ import annotations

from collections.abc import Sequence

import torch

from layernorm_tutorial import functional

__all__ = ["MEMBERS", "normalize", "apply_style", "style_gaps", "batch_size_gaps"]

MEMBERS = ("batch", "layer", "instance", "group")


def _check_images(name: str, x: torch.Tensor) -> None:
    if not isinstance(x, torch.Tensor) or x.dim() != 4:
        raise ValueError(f"{name} must be a 4-D tensor (N, C, H, W), got "
                         f"{getattr(x, 'shape', type(x).__name__)}")


def normalize(x: torch.Tensor, member: str, num_groups: int = 2, eps: float = 1e-5):
    """Normalize ``x`` ``(N, C, H, W)`` with one family member, no affine step.

    ``batch`` uses training-mode batch statistics over ``(N, H, W)``; ``layer`` one mean per
    image over ``(C, H, W)``; ``instance`` one per image and channel over ``(H, W)``;
    ``group`` one per image and block of ``C / num_groups`` channels.
    """
    _check_images("x", x)
    if member == "batch":
        return functional.batch_norm(x, None, None, training=True, eps=eps)
    if member == "layer":
        return functional.layer_norm(x, x.shape[1:], eps=eps)
    if member == "instance":
        return functional.instance_norm(x, eps=eps)
    if member == "group":
        return functional.group_norm(x, num_groups, eps=eps)
    raise ValueError(f"member must be one of {MEMBERS}, got {member!r}")


def apply_style(images: torch.Tensor, contrast: torch.Tensor, offset: torch.Tensor):
    """Per-image, per-channel affine "style": ``images * contrast + offset``.

    ``images`` ``(N, C, H, W)``; ``contrast`` (all > 0) and ``offset`` ``(N, C)``, one value
    per image and channel, broadcast over the positions. Returns ``(N, C, H, W)``.
    """
    _check_images("images", images)
    expected = tuple(images.shape[:2])
    for name, t in (("contrast", contrast), ("offset", offset)):
        if tuple(t.shape) != expected:
            raise ValueError(f"{name} must have shape (N, C) = {expected}, got {tuple(t.shape)}")
    if not (contrast > 0).all():
        raise ValueError("contrast must be > 0 everywhere (a negative contrast flips the image)")
    return images * contrast[:, :, None, None] + offset[:, :, None, None]


def style_gaps(content: torch.Tensor, styled: torch.Tensor, num_groups: int = 2,
               eps: float = 1e-5) -> dict:
    """``{member: max |normalize(content) - normalize(styled)|}`` for the four members.

    ``content`` and ``styled`` are batches of the same shape ``(N, C, H, W)``, each
    normalized as one batch; a gap near zero means the member removes the style.
    """
    _check_images("content", content)
    if styled.shape != content.shape:
        raise ValueError(f"styled must have content's shape {tuple(content.shape)}, got "
                         f"{tuple(styled.shape)}")
    return {member: (normalize(content, member, num_groups, eps)
                     - normalize(styled, member, num_groups, eps)).abs().max().item()
            for member in MEMBERS}


def batch_size_gaps(sample: torch.Tensor, companions: torch.Tensor,
                    batch_sizes: Sequence[int], num_groups: int = 2,
                    eps: float = 1e-5) -> dict:
    """How much one sample's output moves when it shares its batch with others.

    ``sample`` is ``(1, C, H, W)``; for each ``b`` in ``batch_sizes`` it is normalized in the
    batch ``[sample, companions[:b - 1]]`` and compared with its output alone (``b = 1``).
    Returns ``{member: [max |difference| for each b]}``.
    """
    _check_images("sample", sample)
    _check_images("companions", companions)
    if sample.shape[0] != 1 or companions.shape[1:] != sample.shape[1:]:
        raise ValueError(f"sample must be (1, C, H, W) and companions (M, C, H, W) with the "
                         f"same C, H, W; got {tuple(sample.shape)} and "
                         f"{tuple(companions.shape)}")
    if any(not 1 <= b <= companions.shape[0] + 1 for b in batch_sizes):
        raise ValueError(f"every batch size must be in [1, {companions.shape[0] + 1}], got "
                         f"{list(batch_sizes)}")
    gaps = {}
    for member in MEMBERS:
        alone = normalize(sample, member, num_groups, eps)[0]
        gaps[member] = [
            (normalize(torch.cat([sample, companions[:b - 1]]), member, num_groups, eps)[0]
             - alone).abs().max().item()
            for b in batch_sizes]
    return gaps
