"""The GPU-kernel chapter (``book/gpu_kernel.ipynb``): its helpers.

``plots``     bandwidth and roofline figures;
``platform``  where the Triton cells run (the ``# needs triton`` guard for other platforms);
``h100``      the two stored H100 runs, read with their caveats (tie band, L2, targets);
``llm``       RMSNorm after a residual add: bytes, predictions, the interpreter checks;
``cpu_run``   this machine's CPU benchmark read with the tie rule.

The kernels are library code, in :mod:`layernorm_tutorial.triton_kernels`; the benchmark in
:mod:`layernorm_tutorial.bench`.
"""
