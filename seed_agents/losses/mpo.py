"""MPO's losses on tensors: the E-step's weights and temperature, the decoupled M-step.

Abdolmaleki et al. 2018a ("Maximum a Posteriori Policy Optimisation") and 2018b
("Relative Entropy Regularized Policy Iteration", the decoupled KL constraints), in the
form DeepMind's Acme uses (acme/tf/losses/mpo.py):

  E-step: for N actions a_n ~ pi_target(.|s) per state, weights
          q_n(s) = softmax_n(Q(s, a_n) / eta), the sample version of the non-parametric
          policy q(a|s) ~ pi_target(a|s) exp(Q(s, a) / eta) whose KL to pi_target is at
          most `epsilon`; eta is learned by minimizing the dual
          g(eta) = eta epsilon + eta mean_s log (1/N sum_n exp(Q(s, a_n) / eta)).
  M-step: maximize sum_n q_n log pi(a_n|s) (weighted maximum likelihood), with the
          online policy split into two Gaussians, each with one of its parameters
          taken from the target policy: N(online mean, target stddev) and
          N(target mean, online stddev). Each half is held to its own KL bound from
          pi_target (epsilon_mean, epsilon_stddev) by a Lagrange multiplier alpha, per
          action dimension when `per_dim_constraining`: the mean can move without the
          stddev collapsing to pay for it.

Every dual variable (eta, alpha_mean, alpha_stddev) is learned in log space and mapped
through softplus, not exp (Acme's parameterization; its note: for numerical stability),
plus 1e-8 so none reaches 0. Shapes: N samples per state, B states, d action dimensions.
"""

from __future__ import annotations

import tensorflow as tf

from seed_agents.losses.offline import gaussian_log_likelihood

DUAL_FLOOR = 1e-8
"""Added to every softplus(log dual): a multiplier or temperature is never exactly 0."""

MIN_LOG_DUAL = -18.0
"""Where a learner floors each log dual after its step (Acme projects onto >= -18): below
it softplus is ~1e-8 and its gradient too small for the variable ever to come back."""


def dual_value(log_value: tf.Tensor) -> tf.Tensor:
    """softplus(log_value) + 1e-8: a temperature or a multiplier from its log-space variable."""
    return tf.nn.softplus(log_value) + DUAL_FLOOR


def mpo_temperature_and_weights(q_values: tf.Tensor, log_temperature: tf.Tensor,
                                epsilon: float) -> tuple[tf.Tensor, tf.Tensor]:
    """The E-step: (weights [N, B], temperature loss) from Q of N sampled actions per state.

    weights = softmax over the N samples of Q / eta, gradient stopped (they are the
    M-step's targets); eta = softplus(log_temperature) + 1e-8. The loss is the dual

        eta epsilon + eta mean_B (logsumexp_N(Q / eta) - log N),

    whose gradient in eta is epsilon - mean_B KL(weights || uniform): eta falls while the
    weights are closer than `epsilon` to the samples' own (uniform) weighting, and rises
    when they are further. Q's gradient is stopped: only eta learns from it.
    """
    temperature = dual_value(log_temperature)
    tempered = tf.stop_gradient(q_values) / temperature
    weights = tf.stop_gradient(tf.nn.softmax(tempered, axis=0))
    log_num_samples = tf.math.log(tf.cast(tf.shape(q_values)[0], tempered.dtype))
    loss = temperature * (epsilon + tf.reduce_mean(tf.reduce_logsumexp(tempered, axis=0))
                          - log_num_samples)
    return weights, loss


def gaussian_kl(mean_p: tf.Tensor, std_p: tf.Tensor, mean_q: tf.Tensor,
                std_q: tf.Tensor) -> tf.Tensor:
    """KL(p || q) of diagonal Gaussians, per dimension ([B, d] for [B, d] inputs):

        log(std_q / std_p) + (std_p^2 + (mean_p - mean_q)^2) / (2 std_q^2) - 1/2.
    """
    return (tf.math.log(std_q / std_p)
            + (tf.square(std_p) + tf.square(mean_p - mean_q)) / (2.0 * tf.square(std_q))
            - 0.5)


def _kl_constraint(kl: tf.Tensor, log_alpha: tf.Tensor,
                   epsilon: float) -> tuple[tf.Tensor, tf.Tensor, tf.Tensor, tf.Tensor]:
    """(penalty, multiplier loss, alpha, mean KL) of one KL bound, averaged over states:
    the policy sees stop_gradient(alpha) KL, the multiplier alpha (epsilon - stop(KL)),
    summed over its entries (one per action dimension, or one)."""
    alpha = dual_value(log_alpha)
    mean_kl = tf.reduce_mean(kl, axis=0)  # [d] or []
    penalty = tf.reduce_sum(tf.stop_gradient(alpha) * mean_kl)
    dual_loss = tf.reduce_sum(alpha * (epsilon - tf.stop_gradient(mean_kl)))
    return penalty, dual_loss, alpha, mean_kl


def mpo_policy_loss(
    online_mean: tf.Tensor,
    online_std: tf.Tensor,
    target_mean: tf.Tensor,
    target_std: tf.Tensor,
    actions: tf.Tensor,
    q_values: tf.Tensor,
    log_temperature: tf.Tensor,
    log_alpha_mean: tf.Tensor,
    log_alpha_stddev: tf.Tensor,
    epsilon: float,
    epsilon_mean: float,
    epsilon_stddev: float,
    per_dim_constraining: bool = True,
) -> tuple[tf.Tensor, dict[str, tf.Tensor]]:
    """MPO's whole policy-side loss: E-step weights and the decoupled M-step.

    Args:
      online_mean, online_std: the policy being learned at the B states, [B, d].
      target_mean, target_std: the target policy at the same states, [B, d] (the
        actions' sampling distribution and the KL bounds' anchor; gradient stopped).
      actions: N actions per state drawn from the target policy, [N, B, d], unclipped
        (their density is the Gaussian's); `q_values` [N, B] are the critic's at them.
      log_temperature: eta's variable, [].
      log_alpha_mean, log_alpha_stddev: the multipliers' variables, [d] with
        `per_dim_constraining` (one bound per action dimension), [] without (one bound
        on the KL summed over dimensions).
      epsilon, epsilon_mean, epsilon_stddev: the E-step's KL bound and the M-step's two.

    Returns:
      The loss to minimize over the policy's and the three duals' variables at once
      (each term's gradient reaches only its own: the weights and KLs the duals see are
      stopped, as are the multipliers the policy sees):

        -mean_B sum_N w (log N(a; online mean, target std) + log N(a; target mean,
        online std)) + sum alpha_mean KL_mean + sum alpha_std KL_std
        + the multipliers' losses + the temperature's loss,

      where KL_mean = KL(target || N(online mean, target std)) and
      KL_std = KL(target || N(target mean, online std)), averaged over states; and
      metrics: kl_mean, kl_std (averages of the constrained KLs, to compare with
      epsilon_mean and epsilon_stddev), alpha_mean, alpha_std, temperature.
    """
    expected_rank, expected = ((1, "one per action dimension, [d]") if per_dim_constraining
                               else (0, "a scalar, []"))
    for name, log_alpha in (("log_alpha_mean", log_alpha_mean),
                            ("log_alpha_stddev", log_alpha_stddev)):
        if log_alpha.shape.rank != expected_rank:
            raise ValueError(f"{name} has shape {log_alpha.shape}: per_dim_constraining="
                             f"{per_dim_constraining} takes {expected}.")
    target_mean, target_std = tf.stop_gradient(target_mean), tf.stop_gradient(target_std)
    actions = tf.stop_gradient(actions)
    weights, temperature_loss = mpo_temperature_and_weights(q_values, log_temperature, epsilon)

    # The two halves: each moves one parameter, the other held at the target's.
    log_prob_mean_half = gaussian_log_likelihood(actions, online_mean,
                                                 tf.math.log(target_std))  # [N, B]
    log_prob_std_half = gaussian_log_likelihood(actions, target_mean, tf.math.log(online_std))
    cross_entropy = -tf.reduce_mean(
        tf.reduce_sum(weights * (log_prob_mean_half + log_prob_std_half), axis=0))

    kl_mean = gaussian_kl(target_mean, target_std, online_mean, target_std)  # [B, d]
    kl_std = gaussian_kl(target_mean, target_std, target_mean, online_std)
    if not per_dim_constraining:
        kl_mean, kl_std = tf.reduce_sum(kl_mean, -1), tf.reduce_sum(kl_std, -1)  # [B]
    penalty_mean, dual_mean, alpha_mean, mean_kl_mean = _kl_constraint(
        kl_mean, log_alpha_mean, epsilon_mean)
    penalty_std, dual_std, alpha_std, mean_kl_std = _kl_constraint(
        kl_std, log_alpha_stddev, epsilon_stddev)

    loss = (cross_entropy + penalty_mean + penalty_std
            + dual_mean + dual_std + temperature_loss)
    metrics = {
        "kl_mean": tf.reduce_mean(mean_kl_mean),
        "kl_std": tf.reduce_mean(mean_kl_std),
        "alpha_mean": tf.reduce_mean(alpha_mean),
        "alpha_std": tf.reduce_mean(alpha_std),
        "temperature": dual_value(log_temperature),
    }
    return loss, metrics
