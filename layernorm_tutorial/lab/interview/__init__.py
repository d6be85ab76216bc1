"""The interview chapters (``book/interview*.ipynb``): the proofs that need their own code.

A card's proof is found from its topic (the topics of the question index,
``book/interview_index.md``); the part that holds the cards is in brackets
(1 ``interview``, 2 ``interview_advanced``, 3 ``interview_practice``,
4 ``interview_deployment``).

The question bank and its index
  ``bank``                   the real questions, their sources and cards; the index page

LayerNorm basics, LN versus BN, how BatchNorm works [1]
  ``bn_mechanisms``          BN placement, batch noise, dropout's variance shift,
                             weight-scale invariance, weight norm vs BN, pre-activation units
  ``bn_evidence``            BN's benefits next to the evidence chapter's stored verdicts
  ``batch_statistics``       why BN trains with the current batch's statistics
  ``batch_coupling``         how much one sample's output depends on the others, per norm
  ``whitening``              why BN standardizes each feature instead of whitening
  ``distribution_shift``     re-estimating BN statistics (only the BN layers train), TENT
  ``frozen_batch_norm``      FrozenBatchNorm2d from elementary ops; freeze_batch_norm

BatchNorm in practice [2, 3]
  ``sharded_batch_norm``     what each device sees without synchronized statistics [2]
  ``per_sample_gradients``   per-sample gradients: why DP-SGD needs LN or GN, not BN [2]
  ``batch_norm_practice``    micro-batches, ghost BN, Batch Renorm, precise BN, sorted
                             batches, shuffling BN, tiny batches [3]
  ``sync_batch_norm_setup``  SyncBatchNorm with DDP: conversion, device, process group [3]
  ``bn_eval_debugging``      a model that works in train mode and fails in eval mode [3]

The rest of the family, RMSNorm, geometry [1, 2, 3]
  ``classic_norms``          AlexNet's LRN, pRMSNorm, AdaIN and style transfer [1]
  ``group_standardization``  GroupNorm's group count, Weight Standardization [3]
  ``norm_geometry``          LN and RMSNorm as projections and spheres; mean-only and
                             scale-only BN [2]
  ``llama_eps``              LLaMA's RMSNorm epsilon by generation [1, cheat sheet]
  ``norm_defaults``          PyTorch's defaults of the norm modules [cheat sheet]

Recurrent networks [1]
  ``ln_lstm``                where the LayerNorms of a layer-normalized LSTM go

Derivations and gradients [2]
  ``gradient_depth``         gradients through depth: plain, BN, LN, residual, pre-LN stacks
  ``ln_jacobians``           Post-LN and Pre-LN block Jacobians, factored and multiplied

Norm placement in Transformers, stability of large models [2, 4]
  ``deepnet``                DeepNorm's constants for encoder, decoder, encoder-decoder [2]
  ``placement``              the large-models chapter's stored norm placement [2]
  ``traced_models``          facts read from ``transformers`` classes with random weights [2]
  ``logit_stability``        QK-norm's logit bound, soft-capping, z-loss, QK-Clip [2]
  ``powernorm``              batch-statistics noise in padded NLP batches; PowerNorm [2]
  ``outliers``               massive activations and outlier gains next to a norm [2]
  ``tensor_parallel``        a norm whose feature axis is split across devices [2]
  ``position_encoding``      QK-norm and RoPE: what commutes, and the order models use [4]

Conditioning and generative models [2, 4]
  ``adaln``                  adaLN-Zero, the conditioning of diffusion Transformers [2]
  ``conditioning``           FiLM, conditional BN, SPADE, StyleGAN2's demodulation [4]
  ``gan_norms``              spectral normalization; BN and gradient penalties in critics [4]
  ``magnitude_preserving``   EDM2's magnitude-preserving layers instead of GroupNorm [4]

Training without normalization, fine-tuning the norm parameters [2, 3]
  ``normalizer_free``        zero-init gains, Fixup, SkipInit, ReZero, LayerScale, NFNets [3]
  ``norm_finetuning``        norm-only tuning, BitFit, TENT, LoRA and QLoRA and the norms [3]
  ``decay_selection``        which parameters recipes exempt from weight decay [2]

Training failures, debugging and testing [3]
  ``training_failures``      NaNs, gradient spikes, in-place and mode bugs, per layer
  ``mixed_precision_casts``  the dtype casts inside Hugging Face's RMSNorm classes
  ``norm_testing``           how to test a norm implementation, and bugs each check misses

Inference, folding and quantization [2, 4]
  ``folding``                folding a norm's affine map into a neighbouring Linear [2]
  ``fusion``                 what F.layer_norm fuses; bytes of fused neighbours [2]
  ``saved_memory``           what LayerNorm saves for the backward; partial sums [2]
  ``quantization``           (1 + w) gains, integer LayerNorm, rotations, SmoothQuant [4]
  ``engine_precision``       LayerNorm in reduced-precision inference engines [4]

Kernels and performance [4]
  ``vector_kernels``         fixed-width vector code, Newton rsqrt, warp shuffles, merges
  ``block_kernels``          a CUDA-style norm kernel simulated thread by thread
  ``kernel_budgets``         why fused kernels support rows only up to some length
  ``benchmark_reading``      reading a normalization benchmark: kernels and whole calls

Coding drills [1]
  ``rms_norm_exercises``     the RMSNorm drill's checker
  ``norm_drills``            the LayerNorm, BatchNorm and GroupNorm drill's checkers
"""
