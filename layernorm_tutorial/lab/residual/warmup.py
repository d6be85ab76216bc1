"""What happens in the first training steps of post-LN and pre-LN Transformers.

The residual chapter's warm-up experiment. A small
:class:`~layernorm_tutorial.lab.common.transformer.
TokenTransformer` learns to reverse token sequences (``residual_experiments.reverse_task_batch``)
with Adam at learning rate ``lr * warmup_factor(step, warmup_steps)``. Before every update the
trace records, per block ``l`` (1 = nearest the input):

* ``grad_norm[t, l]``: ``||dL/dW2_l||``, the gradient norm of the block's feed-forward output
  weight ``linear2.weight`` on that step's batch (the quantity of Xiong et al. 2020, Fig. 3);
* ``update_ratio[t, l]``: ``||W2_l(t+1) - W2_l(t)|| / ||W2_l(t)||``, how far the step moved
  that weight, relative to its size;

and, per step, the training ``loss[t]``, the learning rate ``lr[t]`` actually used and, for
the first ``probe_steps`` steps, ``output_change[t]``: the root-mean-square change of the
model's logits on a fixed probe batch caused by the step,
``sqrt(mean((f(probe; theta_{t+1}) - f(probe; theta_t))^2))`` (NaN for later steps: two
extra forward passes per step are not free).

Everything runs on a local ``torch.Generator`` and under ``torch.random.fork_rng``: a caller's
global random state is the same after a call as before it.
"""

from __future__ import annotations

import numpy as np
import torch
import torch.nn.functional as torch_functional

from layernorm_tutorial._validation import as_int
from layernorm_tutorial.lab.common.transformer import TokenTransformer
from layernorm_tutorial.lab.residual.experiments import reverse_task_batch, warmup_factor

__all__ = ["TRACE_KEYS", "early_training_trace", "traces_over_seeds"]

TRACE_KEYS = ("grad_norm", "update_ratio", "loss", "lr", "output_change")


def early_training_trace(num_layers: int, norm_first: bool, *, steps: int = 20,
                         lr: float = 1e-2, warmup_steps: int = 0, d_model: int = 32,
                         nhead: int = 2, dim_feedforward: int = 64, seq_len: int = 6,
                         vocab_size: int = 8, batch_size: int = 32, probe_size: int = 32,
                         probe_steps: int = 10, seed: int = 0) -> dict:
    """Train for ``steps`` Adam steps and record the quantities of the module docstring.

    ``norm_first=False`` is post-LN, ``True`` pre-LN (with the final LN). Returns NumPy arrays:
    ``grad_norm`` and ``update_ratio`` of shape ``(steps, num_layers)``, ``loss``, ``lr`` and
    ``output_change`` of shape ``(steps,)``, plus ``"accuracy"``: per-token accuracy on a
    held-out batch of 512 sequences after training (chance: ``1 / vocab_size``).
    Step ``t = 0`` is at initialization: ``grad_norm[0]`` is the gradient of the untrained model.
    """
    num_layers = as_int(num_layers, "num_layers", minimum=1, error=ValueError)
    steps = as_int(steps, "steps", minimum=1, error=ValueError)
    if not lr > 0:
        raise ValueError(f"lr must be positive, got {lr!r}")
    warmup_factor(0, warmup_steps)  # validates warmup_steps
    probe_steps = as_int(probe_steps, "probe_steps", minimum=0, error=ValueError)
    with torch.random.fork_rng(devices=[]):
        torch.manual_seed(seed)  # parameter initialization only; restored on exit
        model = TokenTransformer(vocab_size, vocab_size, seq_len, num_layers, d_model, nhead,
                                 dim_feedforward, norm_first=norm_first)
    optimizer = torch.optim.Adam(model.parameters(), lr=lr, fused=True)  # fewer kernel calls
    data = torch.Generator().manual_seed(seed + 1)
    probe, _ = reverse_task_batch(probe_size, seq_len, vocab_size,
                                  torch.Generator().manual_seed(seed + 20_000))
    weights = [block.linear2.weight for block in model.encoder.layers]
    trace = {key: [] for key in TRACE_KEYS}
    for step in range(steps):
        rate = lr * warmup_factor(step, warmup_steps)
        for group in optimizer.param_groups:
            group["lr"] = rate
        tokens, targets = reverse_task_batch(batch_size, seq_len, vocab_size, data)
        loss = torch_functional.cross_entropy(model(tokens).reshape(-1, vocab_size),
                                              targets.reshape(-1))
        optimizer.zero_grad()
        loss.backward()
        probing = step < probe_steps
        with torch.no_grad():
            before = [w.detach().clone() for w in weights]
            probe_before = model(probe) if probing else None
        optimizer.step()
        with torch.no_grad():
            trace["grad_norm"].append([float(w.grad.norm()) for w in weights])
            trace["update_ratio"].append([float((w - b).norm() / b.norm())
                                          for w, b in zip(weights, before, strict=True)])
            trace["output_change"].append(
                float((model(probe) - probe_before).pow(2).mean().sqrt()) if probing
                else float("nan"))
        trace["loss"].append(float(loss.detach()))
        trace["lr"].append(rate)
    tokens, targets = reverse_task_batch(512, seq_len, vocab_size,
                                         torch.Generator().manual_seed(seed + 10_000))
    with torch.no_grad():
        accuracy = float((model(tokens).argmax(-1) == targets).float().mean())
    result = {key: np.array(values) for key, values in trace.items()}
    result["accuracy"] = accuracy
    return result


def traces_over_seeds(seeds, num_layers: int, norm_first: bool, **kwargs) -> dict:
    """:func:`early_training_trace` for every seed, stacked along a new first axis.

    Returns the same keys with one more leading axis of length ``len(seeds)``
    (``grad_norm``: ``(seeds, steps, num_layers)``; ``accuracy``: ``(seeds,)``).
    """
    seeds = list(seeds)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    runs = [early_training_trace(num_layers, norm_first, seed=s, **kwargs) for s in seeds]
    return {key: np.stack([np.asarray(run[key]) for run in runs])
            for key in (*TRACE_KEYS, "accuracy")}
