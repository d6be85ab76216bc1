"""The interview chapters (``book/interview*.ipynb``): the proofs that need their own code.

``folding``               folding a norm's affine map into a neighbouring Linear layer
``sharded_batch_norm``    what each device sees when BN statistics are not synchronized
``per_sample_gradients``  per-sample gradients: why DP-SGD needs LN or GN, not BN
"""
