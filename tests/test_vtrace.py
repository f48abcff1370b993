"""V-trace and IMPALA losses against independent plain-numpy references.

The reference below deliberately uses the *closed form* of the paper (eq. 1, a sum of
discounted deltas with products of trace coefficients) with explicit loops over t and
b, rather than the backward recursion the implementation uses, so a shared mistake in
the recursion cannot make both sides agree.
"""

from __future__ import annotations

import math

import numpy as np
import pytest
import tensorflow as tf

from seed_agents.losses import policy_gradient as losses
from seed_agents.losses.vtrace import VTraceReturns, vtrace_returns

# One thread keeps the many tiny ops fast and the run deterministic; it fails with
# RuntimeError if TF was already initialised by another test module, which is harmless.
try:
    tf.config.threading.set_intra_op_parallelism_threads(1)
    tf.config.threading.set_inter_op_parallelism_threads(1)
except RuntimeError:
    pass


def _clip(x: float, threshold: float | None) -> float:
    return x if threshold is None else min(threshold, x)


def reference_vtrace(
    log_rhos, discounts, rewards, values, bootstrap, mask, rho_bar, pg_rho_bar, c_bar, lam
):
    """Loop-form V-trace from the paper's definitions, in float64."""
    T, B = values.shape
    if mask is None:
        mask = np.ones((T, B))
    vs = np.zeros((T, B))
    adv = np.zeros((T, B))
    for b in range(B):

        def v(t, b=b):  # V(x_t) with V(x_T) = bootstrap
            return values[t, b] if t < T else bootstrap[b]

        rho = [math.exp(log_rhos[t, b]) for t in range(T)]
        clipped = [_clip(rho[t], rho_bar) * mask[t, b] for t in range(T)]
        cs = [lam * _clip(rho[t], c_bar) * mask[t, b] for t in range(T)]
        deltas = [
            clipped[t] * (rewards[t, b] + discounts[t, b] * v(t + 1) - v(t)) for t in range(T)
        ]
        for t in range(T):
            total = 0.0
            for s in range(t, T):
                weight = 1.0
                for i in range(t, s):
                    weight *= discounts[i, b] * cs[i]
                total += weight * deltas[s]
            vs[t, b] = values[t, b] + total
        for t in range(T):
            vs_next = vs[t + 1, b] if t + 1 < T else bootstrap[b]
            pg_rho = _clip(rho[t], pg_rho_bar) * mask[t, b]
            adv[t, b] = pg_rho * (rewards[t, b] + discounts[t, b] * vs_next - values[t, b])
    return vs, adv


def reference_nstep_returns(discounts, rewards, bootstrap):
    """G_t = r_t + d_t * G_{t+1}, G_T = bootstrap."""
    T, B = rewards.shape
    returns = np.zeros((T, B))
    for b in range(B):
        g = bootstrap[b]
        for t in reversed(range(T)):
            g = rewards[t, b] + discounts[t, b] * g
            returns[t, b] = g
    return returns


def random_inputs(seed: int, T: int, B: int, with_mask: bool):
    rng = np.random.default_rng(seed)
    discounts = rng.uniform(0.0, 1.0, (T, B))
    discounts[rng.uniform(size=(T, B)) < 0.2] = 0.0  # some terminations
    inputs = dict(
        log_rhos=rng.normal(0.0, 1.0, (T, B)),  # rhos spread across both sides of 1
        discounts=discounts,
        rewards=rng.normal(0.0, 1.0, (T, B)),
        values=rng.normal(0.0, 1.0, (T, B)),
        bootstrap_value=rng.normal(0.0, 1.0, (B,)),
        mask=(rng.uniform(size=(T, B)) > 0.3).astype(np.float64) if with_mask else None,
    )
    return {k: None if x is None else x.astype(np.float32) for k, x in inputs.items()}


def run_reference(inputs, rho_bar, pg_rho_bar, c_bar, lam):
    as64 = {k: None if x is None else x.astype(np.float64) for k, x in inputs.items()}
    return reference_vtrace(
        as64["log_rhos"],
        as64["discounts"],
        as64["rewards"],
        as64["values"],
        as64["bootstrap_value"],
        as64["mask"],
        rho_bar,
        pg_rho_bar,
        c_bar,
        lam,
    )


CLIPPINGS = [
    pytest.param((1.0, 1.0, 1.0, 1.0), id="default-clip"),
    pytest.param((None, None, None, 1.0), id="no-clip"),
    pytest.param((2.0, 1.5, 0.5, 0.9), id="mixed-clip-lambda"),
]


@pytest.mark.parametrize("clipping", CLIPPINGS)
@pytest.mark.parametrize("with_mask", [False, True])
@pytest.mark.parametrize("B", [1, 3])
@pytest.mark.parametrize("T", [1, 5, 20])
def test_matches_loop_reference(T, B, with_mask, clipping):
    rho_bar, pg_rho_bar, c_bar, lam = clipping
    for seed in range(3):
        inputs = random_inputs(seed, T, B, with_mask)
        out = vtrace_returns(
            **inputs,
            clip_rho_threshold=rho_bar,
            clip_pg_rho_threshold=pg_rho_bar,
            clip_c_threshold=c_bar,
            lambda_=lam,
        )
        assert isinstance(out, VTraceReturns)
        assert out.vs.shape == (T, B) and out.pg_advantages.shape == (T, B)
        ref_vs, ref_adv = run_reference(inputs, rho_bar, pg_rho_bar, c_bar, lam)
        np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out.pg_advantages.numpy(), ref_adv, rtol=1e-4, atol=1e-4)


@pytest.mark.parametrize("T", [1, 5, 20])
def test_on_policy_vs_equals_nstep_returns(T):
    inputs = random_inputs(seed=7, T=T, B=3, with_mask=False)
    inputs["log_rhos"] = np.zeros_like(inputs["log_rhos"])
    out = vtrace_returns(
        **inputs, clip_rho_threshold=1.0, clip_pg_rho_threshold=2.0, clip_c_threshold=1.0
    )
    returns = reference_nstep_returns(
        inputs["discounts"].astype(np.float64),
        inputs["rewards"].astype(np.float64),
        inputs["bootstrap_value"].astype(np.float64),
    )
    np.testing.assert_allclose(out.vs.numpy(), returns, rtol=1e-5, atol=1e-5)
    # On-policy the advantage is the one-step TD error against the n-step return.
    next_returns = np.concatenate([returns[1:], inputs["bootstrap_value"][None]], axis=0)
    expected_adv = inputs["rewards"] + inputs["discounts"] * next_returns - inputs["values"]
    np.testing.assert_allclose(out.pg_advantages.numpy(), expected_adv, rtol=1e-5, atol=1e-5)


def _truncated_unroll(rng: np.random.Generator):
    """One stream, B = 1: episode A in rows 0..3, episode B in rows 4..5.

    Row 2 is the transition into A's last observation x_3; A is truncated, so its
    discount is 1 (not 0). Row 3 holds x_3 itself and its "transition" into B's first
    observation does not exist, so it is masked.
    """
    T = 6
    inputs = dict(
        log_rhos=rng.normal(0.0, 0.5, (T, 1)),
        discounts=np.array([[0.9], [0.9], [1.0], [0.9], [0.9], [0.9]]),
        rewards=rng.normal(0.0, 1.0, (T, 1)),
        values=rng.normal(0.0, 1.0, (T, 1)),
        bootstrap_value=rng.normal(0.0, 1.0, (1,)),
        mask=np.array([[1.0], [1.0], [1.0], [0.0], [1.0], [1.0]]),
    )
    return {k: x.astype(np.float32) for k, x in inputs.items()}


def test_truncated_episode_bootstraps_from_last_observation():
    inputs = _truncated_unroll(np.random.default_rng(3))
    inputs["log_rhos"][:] = 0.0  # on-policy so the expected values are simple returns
    out = vtrace_returns(**inputs)
    vs, adv = out.vs.numpy()[:, 0], out.pg_advantages.numpy()[:, 0]
    r, d, v = (inputs[k][:, 0] for k in ("rewards", "discounts", "values"))

    # Episode A's return bootstraps from V(x_3), the value of its last observation.
    g2 = r[2] + d[2] * v[3]
    g1 = r[1] + d[1] * g2
    g0 = r[0] + d[0] * g1
    np.testing.assert_allclose(vs[:3], [g0, g1, g2], rtol=1e-5, atol=1e-5)
    # The masked row is inert.
    assert vs[3] == pytest.approx(v[3])
    assert adv[3] == 0.0
    np.testing.assert_allclose(adv[2], r[2] + d[2] * v[3] - v[2], rtol=1e-5, atol=1e-5)


def test_nothing_leaks_across_masked_boundary():
    rng = np.random.default_rng(4)
    inputs = _truncated_unroll(rng)
    base = vtrace_returns(**inputs)

    # Scramble everything that belongs to episode B or to the masked row's fake
    # transition; episode A's outputs (rows 0..2) must not move.
    changed = {k: x.copy() for k, x in inputs.items()}
    for key in ("log_rhos", "rewards", "discounts"):
        changed[key][3:] = rng.normal(0.0, 1.0, (3, 1))
    changed["discounts"] = np.abs(changed["discounts"])
    changed["values"][4:] = rng.normal(5.0, 1.0, (2, 1))
    changed["bootstrap_value"] = np.array([100.0], np.float32)
    other = vtrace_returns(**changed)

    np.testing.assert_allclose(other.vs.numpy()[:3], base.vs.numpy()[:3], rtol=1e-6)
    np.testing.assert_allclose(
        other.pg_advantages.numpy()[:3], base.pg_advantages.numpy()[:3], rtol=1e-6
    )
    assert other.vs.numpy()[3, 0] == pytest.approx(inputs["values"][3, 0])
    assert other.pg_advantages.numpy()[3, 0] == 0.0


def test_tf_function_with_unknown_time_dimension():
    spec = tf.TensorSpec([None, None], tf.float32)

    @tf.function(input_signature=[spec] * 5 + [tf.TensorSpec([None], tf.float32)])
    def compiled(log_rhos, discounts, rewards, values, mask, bootstrap_value):
        return vtrace_returns(
            log_rhos, discounts, rewards, values, bootstrap_value, mask=mask, lambda_=0.95
        )

    for T in (3, 8):
        inputs = random_inputs(seed=T, T=T, B=2, with_mask=True)
        out = compiled(
            inputs["log_rhos"],
            inputs["discounts"],
            inputs["rewards"],
            inputs["values"],
            inputs["mask"],
            inputs["bootstrap_value"],
        )
        ref_vs, ref_adv = run_reference(inputs, 1.0, 1.0, 1.0, 0.95)
        np.testing.assert_allclose(out.vs.numpy(), ref_vs, rtol=1e-4, atol=1e-4)
        np.testing.assert_allclose(out.pg_advantages.numpy(), ref_adv, rtol=1e-4, atol=1e-4)
    assert compiled.experimental_get_tracing_count() == 1


def test_no_gradient_through_targets():
    inputs = random_inputs(seed=0, T=5, B=3, with_mask=True)
    values = tf.Variable(inputs.pop("values"))
    log_rhos = tf.Variable(inputs.pop("log_rhos"))
    with tf.GradientTape(persistent=True) as tape:
        out = vtrace_returns(log_rhos=log_rhos, values=values, **inputs)
        vs_sum = tf.reduce_sum(out.vs)
        adv_sum = tf.reduce_sum(out.pg_advantages)
    for target in (vs_sum, adv_sum):
        for source in (values, log_rhos):
            grad = tape.gradient(target, source)
            assert grad is None or not np.any(grad.numpy())


def test_shape_validation():
    inputs = random_inputs(seed=0, T=4, B=3, with_mask=False)
    with pytest.raises(ValueError, match="rank 2"):
        vtrace_returns(**{**inputs, "rewards": inputs["rewards"][..., None]})
    with pytest.raises(ValueError, match="bootstrap_value"):
        vtrace_returns(**{**inputs, "bootstrap_value": np.zeros((2,), np.float32)})
    with pytest.raises(ValueError, match="discounts"):
        vtrace_returns(**{**inputs, "discounts": np.zeros((5, 3), np.float32)})
    with pytest.raises(ValueError, match="clip_c_threshold"):
        vtrace_returns(**inputs, clip_c_threshold=0.0)


# ----------------------------------------------------------------------------- losses


def test_masked_mean():
    x = np.array([[1.0, 2.0], [3.0, 4.0]], np.float32)
    mask = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    assert losses.masked_mean(x, mask).numpy() == pytest.approx(8.0 / 3.0)
    assert losses.masked_mean(x, None).numpy() == pytest.approx(2.5)
    # All-masked: 0, not NaN.
    assert losses.masked_mean(x, np.zeros_like(mask)).numpy() == 0.0


def test_normalize_uses_valid_rows_only_and_zeroes_the_rest():
    x = np.array([[1.0, 100.0], [3.0, 5.0]], np.float32)
    mask = np.array([[1.0, 0.0], [1.0, 1.0]], np.float32)
    out = losses.normalize(x, mask).numpy()
    valid = np.array([1.0, 3.0, 5.0])
    expected = (valid - valid.mean()) / valid.std()
    np.testing.assert_allclose(out[mask == 1], expected, rtol=1e-5)
    assert out[0, 1] == 0.0  # the masked outlier neither counts nor comes out
    np.testing.assert_allclose(losses.normalize(valid).numpy(), expected, rtol=1e-5)
    # A batch whose valid advantages are all equal has nothing to say: zeros, not NaN.
    np.testing.assert_array_equal(losses.normalize(np.full((2, 2), 7.0), mask).numpy(), 0.0)


def test_policy_gradient_loss_hand_computed():
    # Row 0 uniform over 2 actions, row 1 with probabilities [0.25, 0.75].
    logits = tf.constant([[[0.0, 0.0]], [[0.0, math.log(3.0)]]], tf.float32)  # [T=2, B=1, 2]
    actions = tf.constant([[0], [1]])
    advantages = tf.Variable([[2.0], [-1.0]])
    expected = -(math.log(0.5) * 2.0 + math.log(0.75) * -1.0) / 2.0
    with tf.GradientTape() as tape:
        loss = losses.policy_gradient_loss(logits, actions, advantages)
    assert loss.numpy() == pytest.approx(expected, rel=1e-5)
    assert tape.gradient(loss, advantages) is None

    masked = losses.policy_gradient_loss(logits, actions, advantages, mask=[[0.0], [1.0]])
    assert masked.numpy() == pytest.approx(math.log(0.75), rel=1e-5)


def test_baseline_loss_hand_computed():
    targets = tf.Variable([[1.0, 2.0], [3.0, 4.0]])
    values = tf.Variable(tf.zeros([2, 2]))
    mask = tf.constant([[1.0, 1.0], [0.0, 1.0]])
    with tf.GradientTape(persistent=True) as tape:
        loss = losses.baseline_loss(targets, values, mask)
    assert loss.numpy() == pytest.approx(0.5 * (1.0 + 4.0 + 16.0) / 3.0)
    assert tape.gradient(loss, targets) is None
    # d/dv 0.5 * (t - v)^2 / n = -(t - v) / n on valid rows, 0 on the masked one.
    np.testing.assert_allclose(
        tape.gradient(loss, values).numpy(), [[-1 / 3, -2 / 3], [0.0, -4 / 3]], rtol=1e-5
    )
    assert losses.baseline_loss(targets, values).numpy() == pytest.approx(0.5 * 30.0 / 4.0)


def test_entropy_loss():
    num_actions = 4
    uniform = tf.zeros([3, 2, num_actions])
    assert losses.entropy_loss(uniform).numpy() == pytest.approx(-math.log(num_actions))

    logits = tf.constant([[[0.0, 0.0]], [[0.0, math.log(3.0)]]], tf.float32)
    neg_h1 = 0.25 * math.log(0.25) + 0.75 * math.log(0.75)
    both = losses.entropy_loss(logits)
    assert both.numpy() == pytest.approx((-math.log(2.0) + neg_h1) / 2.0, rel=1e-5)
    only_second = losses.entropy_loss(logits, mask=[[0.0], [1.0]])
    assert only_second.numpy() == pytest.approx(neg_h1, rel=1e-5)


def test_clipped_surrogate_clips_ratios_in_the_direction_of_the_advantage():
    from seed_agents.losses.policy_gradient import clipped_surrogate_loss

    ratios = np.array([[0.5, 1.5, 1.1, 0.9]], np.float32)
    advantages = np.array([[1.0, 1.0, -2.0, -2.0]], np.float32)
    log_rhos = tf.Variable(np.log(ratios))
    with tf.GradientTape() as tape:
        loss = clipped_surrogate_loss(log_rhos, advantages, 0.2)
    # min(r*A, clip(r)*A): 0.5*1 (unclipped, below), 1.2*1 (clipped above),
    # 1.1*-2 (unclipped), 0.9*-2 (unclipped): the mean is the negated loss.
    expected = -(0.5 + 1.2 - 2.2 - 1.8) / 4
    np.testing.assert_allclose(loss.numpy(), expected, rtol=1e-6)
    grad = tape.gradient(loss, log_rhos).numpy()[0]
    assert grad[1] == 0.0  # a clipped ratio passes no gradient
    assert grad[0] != 0.0 and grad[2] != 0.0
    masked = clipped_surrogate_loss(log_rhos, advantages, 0.2,
                                    np.array([[1, 1, 0, 0]], np.float32))
    np.testing.assert_allclose(masked.numpy(), -(0.5 + 1.2) / 2, rtol=1e-6)


def test_clip_fraction_counts_the_ratios_outside_the_band_over_valid_samples():
    from seed_agents.losses.policy_gradient import clip_fraction

    log_rhos = np.log(np.array([[0.5, 1.5, 1.05, 0.95]], np.float32))
    assert clip_fraction(log_rhos, 0.2).numpy() == pytest.approx(0.5)
    assert clip_fraction(log_rhos, 0.6).numpy() == pytest.approx(0.0)
    mask = np.array([[1, 0, 1, 1]], np.float32)  # the masked 1.5 does not count
    assert clip_fraction(log_rhos, 0.2, mask).numpy() == pytest.approx(1 / 3)
