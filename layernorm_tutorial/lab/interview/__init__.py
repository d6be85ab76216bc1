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
``frozen_batch_norm``     FrozenBatchNorm2d from elementary ops; freeze_batch_norm
``bn_mechanisms``         BN placement, batch noise, dropout's variance shift, weight-scale
                          invariance, weight norm vs BN
``distribution_shift``    re-estimating BN statistics, test-batch statistics, TENT
``classic_norms``         AlexNet's LRN, pRMSNorm, AdaIN
``bn_evidence``           BN's benefits next to the evidence chapter's stored verdicts
``rms_norm_exercises``    the RMSNorm drill's checker
``traced_models``         facts read from ``transformers`` classes built with random weights
                          (GPT-J/GPT-NeoX parallel blocks, QK-norm shapes, BLOOM, GLM,
                          DeepSeek-V3's latent norms and router, configuration defaults)
``logit_stability``       QK-norm's logit bound, soft-capping, z-loss, QK-Clip
``powernorm``             batch-statistics noise in padded NLP batches; PowerNorm's forward
``gradient_depth``        gradients through depth: plain, BN, LN, residual, pre-LN stacks
``ln_jacobians``          Post-LN and Pre-LN block Jacobians, factored and multiplied
``deepnet``               DeepNorm's constants for encoder, decoder, encoder-decoder
``placement``             the large-models chapter's stored norm placement, in 80 columns
"""
