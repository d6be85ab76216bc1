"""The LN-vs-BN chapter (``book/ln_vs_bn.ipynb``): batch effects, streaming, data parallelism.

``per_step_batch_norm``   batch norm with statistics per time step (also used by the rnn chapter)
``streaming``             online learning from a stream, one sample per step, LN against BN
``synthetic_cells``       generated single-cell expression counts (why LN suits such data)
``distributed_training``  the data-parallel experiment: per-rank BN, synchronized BN, LN
``exercises``             the batch-norm drills (also used by the interview chapters)
"""
