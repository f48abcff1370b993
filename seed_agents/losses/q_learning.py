"""Q-learning's targets and loss: double-Q over a batch of n-step transitions (DQN, discrete CQL),
and R2D2's value rescaling and n-step double-Q targets over sequences, in TensorFlow and
in numpy.

The TensorFlow versions train; the numpy versions give a new sequence its initial
priority on the inference server, from the Q-values the acting network computed anyway
(so prioritizing costs no extra network call). Both follow the same row layout as the
unrolls (`seed_agents.replay.unrolls`): the reward and discount of the transition t -> t+1
sit in row t+1, and a LAST row ends the episode (its action is never executed).
"""

from __future__ import annotations

import numpy as np
import tensorflow as tf


def huber_td_loss(q_taken: tf.Tensor, targets: tf.Tensor, delta: float = 1.0) -> tf.Tensor:
    """The mean Huber loss of the TD errors `targets - q_taken` ([B] each): quadratic
    within `delta`, linear beyond, so a rare large error moves the network no more than
    a clipped gradient would (DQN's loss)."""
    error = tf.abs(targets - q_taken)
    quadratic = tf.minimum(error, delta)
    return tf.reduce_mean(0.5 * tf.square(quadratic) + delta * (error - quadratic))


def rescale(x, epsilon: float = 1e-3):
    """h(x) = sign(x) (sqrt(|x| + 1) - 1) + epsilon x (Pohlen et al. 2018)."""
    return tf.sign(x) * (tf.sqrt(tf.abs(x) + 1.0) - 1.0) + epsilon * x


def inverse_rescale(x, epsilon: float = 1e-3):
    """The exact inverse of `rescale`:
    h^-1(x) = sign(x) (((sqrt(1 + 4 eps (|x| + 1 + eps)) - 1) / (2 eps))^2 - 1)."""
    if epsilon == 0.0:
        return tf.sign(x) * (tf.square(tf.abs(x) + 1.0) - 1.0)
    root = (tf.sqrt(1.0 + 4.0 * epsilon * (tf.abs(x) + 1.0 + epsilon)) - 1.0) / (2.0 * epsilon)
    return tf.sign(x) * (tf.square(root) - 1.0)


def double_q_targets(
    rewards: tf.Tensor,
    discounts: tf.Tensor,
    next_q_online: tf.Tensor,
    next_q_target: tf.Tensor,
) -> tf.Tensor:
    """y = R + D Q'(o', argmax_a Q(o', a)) for a batch of n-step transitions, no gradient.

    Double DQN (van Hasselt et al. 2016): the online network picks the next action, the
    target network values it. `rewards` [B] are the n-step discounted sums and
    `discounts` [B] hold gamma^n (0 where the episode terminated), as
    `seed_agents.replay.transitions` stores them; the Q-values are [B, A].
    """
    best = tf.argmax(next_q_online, axis=-1, output_type=tf.int32)
    next_value = tf.gather(next_q_target, best, batch_dims=1)
    return tf.stop_gradient(tf.cast(rewards, tf.float32)
                            + tf.cast(discounts, tf.float32) * next_value)


def n_step_double_q_targets(
    q_online: tf.Tensor,
    q_target: tf.Tensor,
    rewards: tf.Tensor,
    discounts: tf.Tensor,
    last: tf.Tensor,
    n: int,
    epsilon: float = 1e-3,
) -> tf.Tensor:
    """Rescaled n-step double-Q targets for rows 0..T-1 of time-major sequences.

    Args:
      q_online: [T+1, B, A] Q-values of the online network; it picks the bootstrap
        action (double Q). No gradient flows through the targets.
      q_target: [T+1, B, A] Q-values of the target network; it values that action.
      rewards: [T+1, B], row t holding the reward for arriving at row t.
      discounts: [T+1, B], gamma times the environment's discount of arriving at row t
        (0 on termination, gamma on truncation or mid-episode).
      last: [T+1, B] bool, true on LAST rows.
      n: the return's length. It is cut short after a LAST row (no reward of the next
        episode leaks in; a terminal row bootstraps with discount 0, a truncated one from
        its own Q-value) and at row T, the last one of the sequence.
      epsilon: the value rescaling's epsilon.

    Returns:
      [T, B]: h(sum_k gamma^k r + gamma^k' h^-1(q_target(s', argmax_a q_online(s', a)))).
    """
    q_online = tf.stop_gradient(q_online)
    q_target = tf.stop_gradient(q_target)
    horizon = tf.shape(rewards)[0] - 1
    bootstrap_action = tf.argmax(q_online, axis=-1, output_type=tf.int32)
    bootstrap = inverse_rescale(
        tf.gather(q_target, bootstrap_action, batch_dims=2), epsilon
    )  # [T+1, B]
    rows = tf.range(horizon)
    returns = tf.zeros_like(rewards[:-1])
    scale = tf.ones_like(rewards[:-1])
    end = tf.broadcast_to(rows[:, None], tf.shape(returns))
    alive = tf.ones_like(returns, tf.bool)
    for k in range(1, n + 1):
        index = tf.minimum(rows + k, horizon)
        reward_k = tf.gather(rewards, index)
        discount_k = tf.gather(discounts, index)
        returns = tf.where(alive, returns + scale * reward_k, returns)
        scale = tf.where(alive, scale * discount_k, scale)
        end = tf.where(alive, index[:, None], end)
        alive = alive & ~tf.gather(last, index) & (index < horizon)[:, None]
    # bootstrap[end[t, b], b], gathered batch-major.
    value = tf.transpose(
        tf.gather(tf.transpose(bootstrap), tf.transpose(end), batch_dims=1)
    )
    return rescale(returns + scale * value, epsilon)


def np_rescale(x: np.ndarray, epsilon: float = 1e-3) -> np.ndarray:
    return np.sign(x) * (np.sqrt(np.abs(x) + 1.0) - 1.0) + epsilon * x


def np_inverse_rescale(x: np.ndarray, epsilon: float = 1e-3) -> np.ndarray:
    if epsilon == 0.0:
        return np.sign(x) * (np.square(np.abs(x) + 1.0) - 1.0)
    root = (np.sqrt(1.0 + 4.0 * epsilon * (np.abs(x) + 1.0 + epsilon)) - 1.0) / (2.0 * epsilon)
    return np.sign(x) * (np.square(root) - 1.0)


def np_n_step_q_targets(
    q: np.ndarray,
    rewards: np.ndarray,
    discounts: np.ndarray,
    last: np.ndarray,
    n: int,
    epsilon: float = 1e-3,
) -> np.ndarray:
    """`n_step_double_q_targets` for one sequence ([T+1, A], [T+1], ...), with one network
    (the acting one) both picking and valuing the bootstrap action: Ape-X's initial
    priorities. Returns [T]."""
    horizon = len(rewards) - 1
    bootstrap = np_inverse_rescale(q.max(axis=-1), epsilon)
    rows = np.arange(horizon)
    returns = np.zeros(horizon)
    scale = np.ones(horizon)
    end = rows.copy()
    alive = np.ones(horizon, bool)
    for k in range(1, n + 1):
        index = np.minimum(rows + k, horizon)
        returns = np.where(alive, returns + scale * rewards[index], returns)
        scale = np.where(alive, scale * discounts[index], scale)
        end = np.where(alive, index, end)
        alive &= ~last[index] & (index < horizon)
    return np_rescale(returns + scale * bootstrap[end], epsilon)
