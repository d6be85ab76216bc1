"""Data-parallel normalization: synchronized batch norm and a process launcher.

In data-parallel training every process (rank) holds a copy of the model and a shard of the
batch. Batch norm computed per rank uses only the shard's statistics; *synchronized* batch
norm sums the per-channel statistics over all ranks. Layer norm needs nothing from other
ranks. One module per job:

:mod:`.sync_batch_norm`
    ``SyncBatchNormFunction`` / ``sync_batch_norm`` / ``SyncBatchNorm``: batch norm whose
    statistics are all-reduced (three collectives per layer and step). Without an initialized
    process group it is ordinary batch norm (as torch's SyncBatchNorm).
:mod:`.communication`
    ``all_reduce_sum`` (the package's one collective) and ``count_communication``, a context
    manager counting the collectives and their payload bytes.
:mod:`.launcher`
    ``run_on_ranks``: run a module-level function in ``world_size`` gloo processes on
    127.0.0.1, with timeouts, process clean-up and the root cause of a failure first.

The ln_vs_bn chapter's data-parallel experiment (the same small network trained with per-rank
BN, synchronized BN and layer norm) lives with the chapter, in
:mod:`layernorm_tutorial.lab.ln_vs_bn.distributed_training`.
"""

from .communication import CommunicationLog, all_reduce_sum, count_communication, is_distributed
from .launcher import DistributedRunError, find_free_port, run_on_ranks
from .sync_batch_norm import SyncBatchNorm, SyncBatchNormFunction, sync_batch_norm

__all__ = ["CommunicationLog", "DistributedRunError", "SyncBatchNorm", "SyncBatchNormFunction",
           "all_reduce_sum", "count_communication", "find_free_port", "is_distributed",
           "run_on_ranks", "sync_batch_norm"]
