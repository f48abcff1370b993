"""One optimizer step with its gradients clipped, the norm kept for the metrics."""

from __future__ import annotations

import tensorflow as tf


def clip_gradients(gradients: list[tf.Tensor],
                   max_norm: float | None) -> tuple[list[tf.Tensor], tf.Tensor]:
    """(`gradients` clipped to global norm `max_norm`, or as they are for None; their
    norm before clipping), for the metrics."""
    norm = tf.linalg.global_norm(gradients)
    if max_norm is not None:
        gradients, _ = tf.clip_by_global_norm(gradients, max_norm, use_norm=norm)
    return gradients, norm


def minimize(tape: tf.GradientTape, loss: tf.Tensor, variables: list[tf.Variable],
             optimizer: tf.keras.optimizers.Optimizer,
             max_norm: float | None) -> tf.Tensor:
    """One optimizer step on `loss` (recorded by `tape`) over `variables`, its gradients
    clipped to `max_norm` (None: not clipped); returns their norm, for the metrics."""
    gradients, norm = clip_gradients(tape.gradient(loss, variables), max_norm)
    optimizer.apply_gradients(zip(gradients, variables, strict=True))
    return norm
