"""The GPU-kernel chapter (``book/gpu_kernel.ipynb``): its figures.

``plots``  bandwidth and roofline figures. The kernel itself is library code, in
:mod:`layernorm_tutorial.triton_kernels`; the benchmark in :mod:`layernorm_tutorial.bench`.
"""
