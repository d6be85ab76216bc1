"""Shim: the family and LN-vs-BN checkers moved to one module per subject.

``check_group_norm``, ``reference_group_norm`` -> :mod:`.group_norm`;
``check_weight_norm``, ``reference_weight_norm`` -> :mod:`.weight_norm`;
``check_running_update`` -> :func:`.batch_norm.check_running_statistics`; the masked and
combined-statistics exercises -> :mod:`.batch_norm`.

shim: removed in the final pass.
"""

# ruff: noqa: F401
from .batch_norm import (
    check_combine_statistics,
    check_masked_batch_norm,
    reference_combine_statistics,
    reference_masked_batch_norm,
    reference_running_update,
)
from .batch_norm import check_running_statistics as check_running_update
from .group_norm import check_group_norm, reference_group_norm
from .weight_norm import check_weight_norm, reference_weight_norm
