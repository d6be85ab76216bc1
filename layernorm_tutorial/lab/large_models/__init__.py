"""The large-models chapter (``book/large_models.ipynb``): normalization in today's models.

``architectures``      where the norms sit in GPT-2, BERT, T5, LLaMA, Qwen3, OLMo 2, Gemma 3
                       (tiny random-weight models from ``transformers`` configs, traced)
``training``           the one toy training loop (the book's reverse task, AdamW)
``qk_norm``            attention-logit growth and divergence with and without QK-norm, and
                       the other logit-stability tools (soft-capping, z-loss, QK-Clip)
``sweep``              the learning-rate ladder summarized (interval-censored critical rates)
``deepnorm``           a deep post-LN stack with and without DeepNorm's scaling and warm-up
``comparisons``        RMSNorm vs LayerNorm vs DyT under the verdict method, DyT's alpha,
                       LayerNorm's per-token map, the CPU cost of each norm
``frontier``           MLA latent norms and the MoE router (DeepSeek-V3, traced), Pre-LN's
                       depth growth and its fixes, nGPT's hypersphere, the logit tools' checks
``recipes``            weight decay and the norm gains, autocast bf16 with layer_norm
``sequence_parallel``  LayerNorm on sequence-sharded activations over two gloo ranks
``results``            the stored results file (``book/data/large_models_results.json``)
``page``               what the chapter's cells print, judge and glue (tested helpers)
``plots``              the chapter's figures

``python -m layernorm_tutorial.lab.large_models --out PATH [--force]`` recomputes the stored
results (about 35 CPU minutes in all; a progress bar shows the time left).
"""
