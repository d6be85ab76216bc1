"""Shim: the interview chapter's helpers moved to the modules of their subjects.

See ``/work/coord/renames.md`` ("A2 renames") for the map.

shim: removed in the final pass.
"""

from .exercises.batch_norm import BatchNormWithRunningStats  # noqa: F401
from .exercises.group_norm import group_norm_via_reshape  # noqa: F401
from .folding import (  # noqa: F401
    fold_affine_into_next_linear,
    fold_batch_norm_into_previous_linear,
)
from .formatting import fmt  # noqa: F401
from .per_sample_gradients import (  # noqa: F401
    batchmate_influence,
    init_mlp_params,
    mlp_losses,
    per_sample_gradients,
    sample_gradient,
)
from .residual_experiments import residual_stack_at_init  # noqa: F401
from .rnn_experiments import rnn_gradient_norms  # noqa: F401
from .roofline import Traffic, norm_traffic  # noqa: F401
from .sharded_batch_norm import shard_moments, unsynchronized_batch_norm  # noqa: F401
from .variance_algorithms import merge_moments, sequential_moments  # noqa: F401
