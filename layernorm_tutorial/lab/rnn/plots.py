"""Figures for the book's RNN chapter. Each helper takes computed data and returns a Figure."""

from __future__ import annotations

import numpy as np

from layernorm_tutorial.lab.common.figure import new_figure

__all__ = [
    "plot_gradient_through_time",
    "plot_hidden_state_norms",
    "plot_learning_curves",
    "plot_normalized_spread",
]


def _axes_list(axes):
    return list(np.atleast_1d(axes))


def plot_hidden_state_norms(panels: dict[str, dict[str, np.ndarray]]):
    """One panel per entry of ``panels`` (title -> {line label -> RMS of h_t per step}).

    x: time step t (1-based); y: ``||h_t|| / sqrt(H)`` on a log scale.
    """
    fig, axes = new_figure(1, len(panels), height=3.4)
    for ax, (title, lines) in zip(_axes_list(axes), panels.items(), strict=True):
        for label, values in lines.items():
            values = np.asarray(values, dtype=float)
            ax.plot(np.arange(1, len(values) + 1), values, label=label,
                    linestyle="-" if label.startswith("LN") else "--")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel("time step t")
        ax.set_ylabel(r"RMS of hidden state $\|h_t\|/\sqrt{H}$")
        ax.legend(fontsize=8)
    return fig


def plot_gradient_through_time(panels: dict[str, dict[str, np.ndarray]]):
    """One panel per entry (title -> {label -> ``||dL/dh_t||`` per step t = 1..T}).

    The loss sits at the last step, so x is the distance ``T - t`` from it; y is log scale.
    """
    fig, axes = new_figure(1, len(panels), height=3.4)
    for ax, (title, lines) in zip(_axes_list(axes), panels.items(), strict=True):
        for label, values in lines.items():
            values = np.asarray(values, dtype=float)
            distance = len(values) - 1 - np.arange(len(values))
            ax.plot(distance, values, label=label,
                    linestyle="-" if label.startswith("LN") else "--")
        ax.set_yscale("log")
        ax.set_title(title)
        ax.set_xlabel(r"distance from the loss $T-t$ (steps)")
        ax.set_ylabel(r"$\|\partial L/\partial h_t\|$")
        ax.legend(fontsize=8)
    return fig


def plot_normalized_spread(spreads: dict[str, np.ndarray], train_steps: int):
    """Per-step std of the normalized summed inputs (what enters tanh) in evaluation mode.

    A dotted vertical line marks the length of the training sequences; the dashed horizontal
    line is the value 1 a correctly normalized input has at initialization.
    """
    fig, ax = new_figure(1, 1, height=3.2)
    for label, values in spreads.items():
        values = np.asarray(values, dtype=float)
        ax.plot(np.arange(1, len(values) + 1), values, label=label)
    ax.axvline(train_steps + 0.5, color="gray", linestyle=":",
               label=f"longest training sequence ({train_steps} steps)")
    ax.axhline(1.0, color="black", linewidth=0.8, linestyle="--")
    ax.set_xlabel("time step t")
    ax.set_ylabel("std of normalized summed input")
    ax.legend(fontsize=8)
    return fig


def plot_learning_curves(histories: dict[str, dict[str, list[float]]]):
    """Two panels: mean training loss per epoch and test accuracy after each epoch.

    ``histories`` maps a model label to ``{"train_loss": [...], "test_accuracy": [...]}``.
    """
    fig, (ax_loss, ax_acc) = new_figure(1, 2, height=3.4)
    for label, history in histories.items():
        epochs = np.arange(1, len(history["train_loss"]) + 1)
        style = "-" if label.startswith("LN") else (":" if label.startswith("BN") else "--")
        ax_loss.plot(epochs, history["train_loss"], style, label=label)
        ax_acc.plot(epochs, history["test_accuracy"], style, label=label)
    ax_loss.set_xlabel("epoch")
    ax_loss.set_ylabel("training cross-entropy (nats)")
    ax_acc.set_xlabel("epoch")
    ax_acc.set_ylabel("test accuracy")
    ax_loss.legend(fontsize=8)
    ax_acc.legend(fontsize=8)
    return fig
