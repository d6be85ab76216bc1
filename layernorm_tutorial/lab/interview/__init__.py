"""The interview chapters (``book/interview*.ipynb``): the proofs that need their own code.

``folding``               folding a norm's affine map into a neighbouring Linear layer
``sharded_batch_norm``    what each device sees when BN statistics are not synchronized, and
                          what torch's SyncBatchNorm gathers and reduces
``per_sample_gradients``  per-sample gradients: why DP-SGD needs LN or GN, not BN
``saved_memory``          what LayerNorm saves for the backward; the output-saving variant
``fusion``                operators of F.layer_norm; bytes per element of fused neighbours
``tensor_parallel``       a norm whose feature axis is split across devices
``outliers``              massive activations and outlier gains next to a norm (mechanisms)
``adaln``                 adaLN-Zero, the conditioning of diffusion Transformers
"""
