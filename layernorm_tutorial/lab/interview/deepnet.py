r"""DeepNorm's constants for the three architectures of the DeepNet paper (Wang et al.
2022), for an encoder of ``N`` blocks and a decoder of ``M`` blocks:

================  ============================  ==============================
architecture      encoder :math:`\alpha,\beta`   decoder :math:`\alpha,\beta`
================  ============================  ==============================
encoder-only      :math:`(2N)^{1/4},(8N)^{-1/4}`  --
decoder-only      --                             :math:`(2M)^{1/4},(8M)^{-1/4}`
encoder-decoder   :math:`0.81(N^4M)^{1/16},`     :math:`(3M)^{1/4},(12M)^{-1/4}`
                  :math:`0.87(N^4M)^{-1/16}`
================  ============================  ==============================

Each block computes :math:`x_{l+1} = \mathrm{LN}(\alpha x_l + G_l(x_l))`, and the weights of
the feed-forward layers and of the value and output projections start with Xavier-normal
gain :math:`\beta` (queries and keys with gain 1).

The authors' code (microsoft/torchscale, ``torchscale/architecture/encoder.py``) departs
from the table for the encoder of an encoder-decoder: it divides the weights by
:math:`(N^4M)^{1/16}/1.15`, a gain of :math:`1.15\,(N^4M)^{-1/16}`
(:func:`torchscale_encoder_beta`), not :math:`0.87\,(N^4M)^{-1/16}`.
"""

from __future__ import annotations

__all__ = ["ARCHITECTURES", "deepnet_constants", "torchscale_encoder_beta"]

ARCHITECTURES = ("encoder-only", "decoder-only", "encoder-decoder")


def _positive(name: str, value) -> int:
    if not isinstance(value, int) or isinstance(value, bool) or value < 1:
        raise ValueError(f"{name} must be a positive int, got {value!r}")
    return value


def deepnet_constants(architecture: str, encoder_layers: int | None = None,
                      decoder_layers: int | None = None) -> dict[str, tuple[float, float]]:
    """``{"encoder": (alpha, beta), "decoder": (alpha, beta)}`` (only the parts that exist)."""
    if architecture not in ARCHITECTURES:
        raise ValueError(f"architecture must be one of {ARCHITECTURES}, got {architecture!r}")
    if architecture == "encoder-only":
        n = _positive("encoder_layers", encoder_layers)
        return {"encoder": ((2 * n) ** 0.25, (8 * n) ** -0.25)}
    if architecture == "decoder-only":
        m = _positive("decoder_layers", decoder_layers)
        return {"decoder": ((2 * m) ** 0.25, (8 * m) ** -0.25)}
    n = _positive("encoder_layers", encoder_layers)
    m = _positive("decoder_layers", decoder_layers)
    return {"encoder": (0.81 * (n ** 4 * m) ** (1 / 16), 0.87 * (n ** 4 * m) ** (-1 / 16)),
            "decoder": ((3 * m) ** 0.25, (12 * m) ** -0.25)}


def torchscale_encoder_beta(encoder_layers: int, decoder_layers: int) -> float:
    """The encoder's initialization gain of an encoder-decoder in torchscale's code.

    ``init_scale = (N^4 M)^(1/16) / 1.15`` and the weights are divided by it, so the gain is
    ``1.15 (N^4 M)^(-1/16)``: the paper's 0.87 (about 1/1.15) applied the other way round.
    """
    n = _positive("encoder_layers", encoder_layers)
    m = _positive("decoder_layers", decoder_layers)
    init_scale = (n ** 4 * m) ** 0.0625 / 1.15
    return 1.0 / init_scale
