"""Shared configuration and helpers for the tests of the core package.

Hypothesis profiles
-------------------
``core`` (the default) keeps the core suite fast and reproducible: no deadline (torch's first
calls are slow), a dozen examples per property, derandomized so that CI sees the same
examples on every run. ``thorough`` explores far more and is meant for a local deep run::

    HYPOTHESIS_PROFILE=thorough pytest tests/test_functional.py

Torch runs single-threaded in the tests (tiny tensors); LAYERNORM_TEST_THREADS=N overrides.

Helpers
-------
The comparison helpers live here (not in each test file) so that ``test_known_wrong.py`` can
show that *the very checks the real tests use* reject deliberately wrong implementations.
Test modules import them with ``from conftest import ...`` (pytest puts ``tests/`` on
``sys.path`` because the folder has no ``__init__.py``).
"""

from __future__ import annotations

import importlib.util
import math
import os
import shutil
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass

import torch
import torch.nn.functional as TF
from hypothesis import HealthCheck, settings
from hypothesis import strategies as st

# Without a GPU the Triton kernels run in Triton's interpreter, which must be switched on
# before anything imports triton (torch.compile does). Importing the kernels package first
# arranges that, whatever order pytest collects the test modules in. Where Triton is not
# installed (macOS, Windows: no wheel) there is nothing to arrange; the kernels' tests skip
# themselves with one reason (TRITON_MISSING).
try:
    import layernorm_tutorial.triton_kernels  # noqa: F401
    TRITON_MISSING = None
except ImportError as err:
    if "need the triton package" not in str(err):  # a real import error, not a platform
        raise
    TRITON_MISSING = "needs Triton (Linux x86-64/aarch64 only), not installed here"

# --------------------------------------------------------------------------------------
# nbval on the chapters: cells that need what a platform may lack are skipped, not failed.
# --------------------------------------------------------------------------------------
# Triton has wheels for Linux x86-64 and aarch64 only, and torch.compile needs a C++
# compiler on the CPU. A notebook code cell tagged ``triton`` (the GPU kernel chapter's
# interpreter cells, Liger, torch.compile on Triton; ``requires-triton`` is accepted too) or
# ``requires-compiler`` (torch.compile on the CPU) is skipped, with one reason, where that is
# missing; everywhere else it runs and its stored output is compared as usual. The hook lives
# here, not in a book/conftest.py: a second module named ``conftest`` would shadow this one
# for the test modules that import its helpers. It sees every collected item (the
# collection hook is session-wide), the notebooks' cells included.
TRITON_TAGS = ("triton", "requires-triton")
COMPILER_TAGS = ("requires-compiler",)


def _triton_cells_missing() -> str | None:
    try:
        import triton  # noqa: F401
    except ImportError:
        return ("needs Triton (wheels for Linux x86-64/aarch64 only), which is not "
                "installed here")
    try:
        liger = importlib.util.find_spec("liger_kernel")
    except ImportError:
        liger = None
    if liger is None:
        return "needs Liger-Kernel (Linux only, with Triton), which is not installed here"
    return None


def _compiler_missing() -> str | None:
    compilers = [os.environ.get("CXX"), "g++", "clang++", "c++", "cl"]
    if any(c and shutil.which(c) for c in compilers):
        return None
    return "needs a C++ compiler for torch.compile, none found on PATH"


def pytest_collection_modifyitems(config, items):
    import pytest

    reasons = {}
    for item in items:
        cell = getattr(item, "cell", None)
        if cell is None:
            continue
        tags = cell.get("metadata", {}).get("tags", [])
        for kind, names, check in (("triton", TRITON_TAGS, _triton_cells_missing),
                                   ("compiler", COMPILER_TAGS, _compiler_missing)):
            if any(name in tags for name in names):
                if kind not in reasons:
                    reasons[kind] = check()
                if reasons[kind]:
                    item.add_marker(pytest.mark.skip(reason=reasons[kind]))


settings.register_profile(
    "core",
    deadline=None,
    max_examples=12,
    derandomize=True,
    database=None,
    suppress_health_check=[HealthCheck.too_slow],
    print_blob=True,
)
settings.register_profile(
    "thorough",
    deadline=None,
    max_examples=300,
    suppress_health_check=[HealthCheck.too_slow],
)
settings.load_profile(os.environ.get("HYPOTHESIS_PROFILE", "core"))

# The tests use tiny tensors, for which intra-op threads only add overhead; on a busy machine
# spinning worker threads made the nn tests 7x slower (66 s -> 9 s with one thread).
torch.set_num_threads(int(os.environ.get("LAYERNORM_TEST_THREADS", "1")))

F64 = torch.float64

# Tolerances for "ours vs torch". float64 differences come only from summation order
# (~1e-15 relative); 1e-7 is loose for that yet 50x tighter than the smallest deliberate
# error in test_known_wrong.py (eps outside the square root: ~eps/2 = 5e-6 relative).
# fp16/bf16: both sides compute in fp32 and round once; allow a few units in the last place.
TOLERANCES: dict[torch.dtype, dict[str, float]] = {
    torch.float64: {"rtol": 1e-7, "atol": 1e-9},
    torch.float32: {"rtol": 1e-4, "atol": 1e-5},
    torch.float16: {"rtol": 4e-3, "atol": 1e-2},
    torch.bfloat16: {"rtol": 3e-2, "atol": 5e-2},
}


# --------------------------------------------------------------------------------------
# Random tensors (float64 by default, reproducible from an integer seed)
# --------------------------------------------------------------------------------------
def randn(shape: Iterable[int], seed: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Standard normal tensor of ``shape`` drawn in float64 from ``seed``, cast to ``dtype``."""
    gen = torch.Generator().manual_seed(int(seed))
    return torch.randn(tuple(shape), generator=gen, dtype=F64).to(dtype)


def positive(shape: Iterable[int], seed: int, dtype: torch.dtype = F64) -> torch.Tensor:
    """Strictly positive tensor in [0.5, 2.5): a plausible running variance."""
    gen = torch.Generator().manual_seed(int(seed))
    return (0.5 + 2.0 * torch.rand(tuple(shape), generator=gen, dtype=F64)).to(dtype)


def non_contiguous(x: torch.Tensor) -> torch.Tensor:
    """A non-contiguous view with the same values as ``x`` (every other element of a buffer)."""
    buffer = torch.zeros((*x.shape, 2), dtype=x.dtype)
    buffer[..., 0] = x
    view = buffer[..., 0]
    assert view.numel() <= 1 or not view.is_contiguous()
    return view


def clone_keep_strides(x: torch.Tensor) -> torch.Tensor:
    """Detached copy of ``x`` with the same strides (``clone`` would densify a strided view)."""
    out = torch.empty_strided(x.size(), x.stride(), dtype=x.dtype)
    with torch.no_grad():
        out.copy_(x)
    return out


def affine_params(
    mode: str, shape: Iterable[int], seed: int, dtype: torch.dtype = F64
) -> tuple[torch.Tensor | None, torch.Tensor | None]:
    """(weight, bias) for ``mode`` in {"both", "weight", "bias", "none"}; random, not 1/0."""
    shape = tuple(shape)
    weight = randn(shape, seed + 1, dtype) if mode in ("both", "weight") else None
    bias = randn(shape, seed + 2, dtype) if mode in ("both", "bias") else None
    return weight, bias


# --------------------------------------------------------------------------------------
# Running a function and collecting output, gradients and in-place side effects
# --------------------------------------------------------------------------------------
@dataclass
class Evaluation:
    """What one call produced: the output, gradients of <output, upstream> w.r.t. the
    differentiable arguments, and every tensor argument as it was *after* the call
    (so in-place updates of running statistics are visible)."""

    output: torch.Tensor
    grads: dict[str, torch.Tensor]
    tensors_after: dict[str, torch.Tensor]


def make_upstream(shape: torch.Size, dtype: torch.dtype, upstream: str, seed: int):
    """The upstream gradient: random normal (default), or all ones (only for demonstrations
    in test_known_wrong.py of why ``.sum().backward()`` hides errors)."""
    if upstream == "ones":
        return torch.ones(shape, dtype=dtype)
    if upstream == "random":
        return randn(shape, seed, F64).to(dtype)
    raise ValueError(f"upstream must be 'random' or 'ones', got {upstream!r}")


def evaluate(
    fn: Callable[..., torch.Tensor],
    kwargs: Mapping[str, object],
    grad_names: Iterable[str] = ("input", "weight", "bias"),
    *,
    upstream: str = "random",
    upstream_seed: int = 12345,
) -> Evaluation:
    """Call ``fn(**kwargs)`` on private copies of every tensor argument and differentiate
    ``sum(output * upstream)`` w.r.t. the arguments named in ``grad_names`` (those that are
    tensors). Gradients of unused arguments are materialized as zeros, as torch does."""
    call: dict[str, object] = {}
    for name, value in kwargs.items():
        if isinstance(value, torch.Tensor):
            value = clone_keep_strides(value)
            if name in grad_names and value.is_floating_point():
                value.requires_grad_(True)
        call[name] = value
    output = fn(**call)
    assert isinstance(output, torch.Tensor), f"expected a Tensor, got {type(output).__name__}"
    diff_names = [
        n for n in grad_names if isinstance(call.get(n), torch.Tensor) and call[n].requires_grad
    ]
    grads: dict[str, torch.Tensor] = {}
    if diff_names:
        assert output.requires_grad, "output does not require grad: not differentiable"
        up = make_upstream(output.shape, output.dtype, upstream, upstream_seed)
        values = torch.autograd.grad(
            output, [call[n] for n in diff_names], up, materialize_grads=True
        )
        grads = dict(zip(diff_names, values, strict=True))
    after = {
        n: v.detach().clone() for n, v in call.items() if isinstance(v, torch.Tensor)
    }
    return Evaluation(output.detach(), grads, after)


def assert_close(actual, expected, what: str, dtype: torch.dtype | None = None, **tol) -> None:
    """``torch.testing.assert_close`` with this suite's per-dtype tolerances (overridable),
    checking shape and dtype too, and naming the quantity in the failure message."""
    dtype = dtype or expected.dtype
    tolerance = {**TOLERANCES.get(dtype, TOLERANCES[F64]), **tol}
    torch.testing.assert_close(
        actual, expected, **tolerance, msg=lambda m: f"{what} differs from reference:\n{m}"
    )


def assert_matches(
    ours: Callable[..., torch.Tensor],
    reference: Callable[..., torch.Tensor],
    kwargs: Mapping[str, object],
    grad_names: Iterable[str] = ("input", "weight", "bias"),
    *,
    upstream: str = "random",
    upstream_seed: int = 12345,
    **tol,
) -> tuple[Evaluation, Evaluation]:
    """Assert that ``ours(**kwargs)`` equals ``reference(**kwargs)``: same output (values,
    shape, dtype), same gradients w.r.t. ``grad_names`` for the same upstream gradient, and
    the same tensor arguments after the call (running statistics updated identically, the
    input left untouched). Raises AssertionError naming what differs."""
    grad_names = tuple(grad_names)
    mine = evaluate(ours, kwargs, grad_names, upstream=upstream, upstream_seed=upstream_seed)
    ref = evaluate(reference, kwargs, grad_names, upstream=upstream, upstream_seed=upstream_seed)
    assert_close(mine.output, ref.output, "output", **tol)
    assert mine.grads.keys() == ref.grads.keys(), (mine.grads.keys(), ref.grads.keys())
    for name in ref.grads:
        assert_close(mine.grads[name], ref.grads[name], f"gradient w.r.t. {name}", **tol)
    for name in ref.tensors_after:
        assert_close(
            mine.tensors_after[name], ref.tensors_after[name], f"{name} after the call", **tol
        )
    return mine, ref


def gradcheck_wrt(fn, tensors: Mapping[str, object], grad_names=("input", "weight", "bias"),
                  *, raise_exception: bool = True, **static) -> bool:
    """``torch.autograd.gradcheck`` of ``fn(**tensors, **static)`` w.r.t. the tensors named in
    ``grad_names`` (float64 leaves). Running statistics get fresh copies on every call."""
    names = [n for n in grad_names if tensors.get(n) is not None]
    leaves = [tensors[n].detach().clone().requires_grad_(True) for n in names]

    def call(*values):
        kwargs = {**tensors, **dict(zip(names, values, strict=True)), **static}
        for key in ("running_mean", "running_var"):
            if kwargs.get(key) is not None:
                kwargs[key] = kwargs[key].clone()
        return fn(**kwargs)

    return torch.autograd.gradcheck(call, leaves, eps=1e-6, atol=1e-5, rtol=1e-4,
                                    raise_exception=raise_exception)


# NumPy backward vs numerical_gradient(h=1e-5) in float64: truncation error ~h^2 * f''' and
# rounding error ~1e-16 * |f| / h are far below these for O(1) data; a wrong formula is O(1).
NUMERIC_GRAD_TOL = {"rtol": 1e-5, "atol": 1e-6}


# --------------------------------------------------------------------------------------
# Numerical robustness checks (used by test_numerics.py and test_known_wrong.py)
# --------------------------------------------------------------------------------------
# Issue 2: x = 1e4 + N(0, 1) in float32 "matches a float64 reference to ~1e-3". Even a
# perfectly rounded float32 mean of values near 1e4 is off by up to half an ulp (4.9e-4), i.e.
# ~5e-4 / std in the output; torch's own float32 kernel reaches 1.0e-3 on these inputs. 2e-3
# keeps that margin while E[x^2] - E[x]^2 is off by O(1) or nan.
OFFSET_TOL = 2e-3


def large_offset_input(shape, seed: int = 0) -> torch.Tensor:
    """float32 values 1e4 + N(0, 1): mean/std ratio 1e4, so E[x^2] - E[x]^2 cancels."""
    return (1e4 + randn(shape, seed)).to(torch.float32)


def check_large_offset_layer_norm(layer_norm, rows: int = 8, width: int = 256) -> float:
    """Assert ``layer_norm(x, (width,))`` on float32 1e4 + N(0, 1) rows is within OFFSET_TOL
    of float64 (nan fails). Returns the max abs error."""
    x = large_offset_input((rows, width))
    out = layer_norm(x, (width,))
    assert out.dtype == torch.float32, out.dtype
    err = (out.double() - TF.layer_norm(x.double(), (width,))).abs().max().item()
    assert err < OFFSET_TOL, f"max abs error {err:.2e} vs float64 (tolerance {OFFSET_TOL})"
    return err


# The mean of n copies of c is not always exactly c in floating point (0.1 * 7 / 7).
CONSTANTS = [0.1, 3.7, -123.456, 1.0 / 3.0, 1e4 + 0.3, 7e5 + 0.1]
WIDTHS = [1, 3, 7, 10, 100, 1000]


def check_constant_rows_layer_norm(layer_norm, dtype: torch.dtype) -> None:
    """Assert that rows of one repeated value normalize to exactly the bias (eps=1e-6)."""
    for width in WIDTHS:
        x = torch.tensor(CONSTANTS, dtype=dtype)[:, None].expand(len(CONSTANTS), width)
        weight, bias = randn((width,), 5, dtype), randn((width,), 6, dtype)
        out = layer_norm(x.contiguous(), (width,), weight, bias, eps=1e-6)
        expected = bias.expand_as(out)
        bad = (out != expected).any(dim=1)
        assert not bad.any(), (
            f"width {width}: rows with constants "
            f"{[c for c, b in zip(CONSTANTS, bad.tolist(), strict=True) if b]} "
            f"differ from the bias by up to {(out - expected).abs().max().item():.3g}"
        )


def check_zero_half_input_is_finite(norm) -> None:
    """Assert ``norm(x, eps=1e-12)`` of all-zero fp16 ``x`` (2, 3, 4) is finite zeros in fp16.
    eps=1e-12 rounds to 0 in fp16: an fp16 computation gives 0 / sqrt(0) = nan."""
    out = norm(torch.zeros(2, 3, 4, dtype=torch.float16), eps=1e-12)
    assert out.dtype == torch.float16, out.dtype
    assert torch.isfinite(out).all(), out
    assert torch.equal(out, torch.zeros_like(out)), out


# --------------------------------------------------------------------------------------
# Autograd graph inspection
# --------------------------------------------------------------------------------------
TORCH_NATIVE_NORM_NODES = ("NativeLayerNorm", "NativeBatchNorm", "NativeGroupNorm",
                           "CudnnBatchNorm", "MiopenBatchNorm", "RmsNorm", "FusedRmsNorm")


def graph_node_names(output: torch.Tensor) -> set[str]:
    """Names of all autograd nodes reachable from ``output.grad_fn``."""
    seen, stack, names = set(), [output.grad_fn], set()
    while stack:
        node = stack.pop()
        if node is None or node in seen:
            continue
        seen.add(node)
        names.add(type(node).__name__)
        stack.extend(next_node for next_node, _ in node.next_functions)
    return names


# --------------------------------------------------------------------------------------
# Hypothesis strategies: keyword arguments for each functional op (small shapes)
# --------------------------------------------------------------------------------------
seeds = st.integers(min_value=0, max_value=2**31 - 1)
affine_modes = st.sampled_from(["both", "weight", "bias", "none"])
small_eps = st.sampled_from([1e-5, 1e-3, 0.1])


@st.composite
def layer_norm_kwargs(draw, *, allow_rms_eps_none: bool = False, rms: bool = False):
    """kwargs for layer_norm (or rms_norm when ``rms``): leading batch dims (sizes 0..3,
    so empty batches occur), 1-3 normalized dims, any affine mode, possibly non-contiguous."""
    batch = draw(st.lists(st.integers(0, 3), min_size=0, max_size=2))
    normalized = tuple(draw(st.lists(st.integers(1, 4), min_size=1, max_size=3)))
    seed = draw(seeds)
    x = randn((*batch, *normalized), seed)
    if draw(st.booleans()):
        x = non_contiguous(x)
    if rms:
        mode = draw(st.sampled_from(["weight", "none"]))
        weight, _ = affine_params(mode, normalized, seed)
        eps = draw(st.one_of(st.none(), small_eps)) if allow_rms_eps_none else draw(small_eps)
        return {"input": x, "normalized_shape": normalized, "weight": weight, "eps": eps}
    weight, bias = affine_params(draw(affine_modes), normalized, seed)
    return {
        "input": x,
        "normalized_shape": normalized,
        "weight": weight,
        "bias": bias,
        "eps": draw(small_eps),
    }


@st.composite
def batch_norm_kwargs(draw, *, training: bool | None = None):
    """kwargs for batch_norm: (N, C, *spatial) with N in 0..4, 0-2 spatial dims; training
    or eval; running statistics present or None (always present in eval); any momentum."""
    training = draw(st.booleans()) if training is None else training
    n = draw(st.integers(0, 4))
    c = draw(st.integers(1, 3))
    spatial = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    if training and n * math.prod(spatial) == 1:
        n = 2  # torch raises for one value per channel; that path is tested in test_errors
    seed = draw(seeds)
    with_stats = (not training) or draw(st.booleans())
    weight, bias = affine_params(draw(affine_modes), (c,), seed)
    return {
        "input": randn((n, c, *spatial), seed),
        "running_mean": randn((c,), seed + 3) if with_stats else None,
        "running_var": positive((c,), seed + 4) if with_stats else None,
        "weight": weight,
        "bias": bias,
        "training": training,
        "momentum": draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
        "eps": draw(small_eps),
    }


@st.composite
def group_norm_kwargs(draw):
    """kwargs for group_norm: (N, G*k, *spatial), N in 1..3, 0-2 spatial dims. (Empty
    batches are tested separately: torch 2.13's own group_norm backward fails on them.)"""
    n = draw(st.integers(1, 3))
    groups = draw(st.integers(1, 3))
    c = groups * draw(st.integers(1, 3))
    spatial = draw(st.lists(st.integers(1, 3), min_size=0, max_size=2))
    if n * (c // groups) * math.prod(spatial) == 1:
        n = 2  # torch raises ValueError here (tested in test_errors)
    seed = draw(seeds)
    weight, bias = affine_params(draw(affine_modes), (c,), seed)
    return {
        "input": randn((n, c, *spatial), seed),
        "num_groups": groups,
        "weight": weight,
        "bias": bias,
        "eps": draw(small_eps),
    }


@st.composite
def instance_norm_kwargs(draw):
    """kwargs for instance_norm: (N, C, *spatial) with 1-2 spatial dims; running statistics
    present or None; use_input_stats True/False (False needs running statistics)."""
    n = draw(st.integers(1, 3))
    c = draw(st.integers(1, 3))
    spatial = draw(st.lists(st.integers(1, 3), min_size=1, max_size=2))
    use_input_stats = draw(st.booleans())
    if use_input_stats and math.prod(spatial) == 1:
        spatial = [*spatial[:-1], 2]
    seed = draw(seeds)
    with_stats = (not use_input_stats) or draw(st.booleans())
    weight, bias = affine_params(draw(affine_modes), (c,), seed)
    return {
        "input": randn((n, c, *spatial), seed),
        "running_mean": randn((c,), seed + 3) if with_stats else None,
        "running_var": positive((c,), seed + 4) if with_stats else None,
        "weight": weight,
        "bias": bias,
        "use_input_stats": use_input_stats,
        "momentum": draw(st.sampled_from([0.0, 0.1, 0.5, 1.0])),
        "eps": draw(small_eps),
    }
