"""The V-trace learner's tuning options: value normalization (running / PopArt), a learning
rate adapted to a KL target, PPO-style minibatches and observation normalization.

Learners here train on real unrolls: 8 fake environments act through central inference
into the real Reverb queue once per module, the batches sampled from it are kept, and each
learner reads them from a `tf.data` dataset, so two learners can see the very same batch
(or one with its rewards scaled).
"""

from __future__ import annotations

import dataclasses
import math
import threading

import numpy as np
import pytest
import reverb
import tensorflow as tf
import tree

from builders.vtrace import VTraceBuilder
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.agents.vtrace.learning import (
    VTraceLearner,
    adapt_learning_rate,
    minibatch_indices,
)
from seed_agents.agents.vtrace.networks import PolicyValueNetwork, ValueNormalizer
from seed_agents.envs import environment_factory
from seed_agents.inference.runner import EnvRunner
from seed_agents.inference.server import InferenceConfig
from seed_agents.networks.normalization import ObservationNormalizer
from seed_agents.replay import make_dataset, unrolls
from seed_agents.specs import EnvironmentSpec, make_environment_spec
from seed_agents.utils.checkpointing import Checkpointer
from seed_agents.utils.counting import Counter
from tests.test_vtrace_agent import _learner_on_served_unrolls

UNROLL_LENGTH, BATCH_SIZE, NUM_BATCHES = 5, 4, 4
ENVIRONMENT = "fake:obs=4,len=7"


def _config(**options) -> VTraceConfig:
    # One gradient step per batch unless a test needs more: each is traced into the
    # learner's graph, and tracing is most of a test's time here.
    options = {"sgd_steps_per_batch": 1, **options}
    return VTraceConfig(unroll_length=UNROLL_LENGTH, batch_size=BATCH_SIZE, queue_size=16,
                        hidden_sizes=(16,), **options)


@pytest.fixture(scope="module")
def served() -> tuple[EnvironmentSpec, list[dict]]:
    """(spec, batches): NUM_BATCHES batches of BATCH_SIZE unrolls, acted by 8 fake
    environments through central inference into the real queue, as numpy."""
    config = _config()
    builder = VTraceBuilder(config)
    make_env = environment_factory(ENVIRONMENT)
    spec = make_environment_spec(make_env(0))
    policy = builder.make_policy(builder.make_networks(spec), spec, seed=1)
    replay = reverb.Server(builder.make_replay_tables(spec, policy), port=None)
    stop = threading.Event()
    server = adder = None
    try:
        adder = builder.make_adder(replay.localhost_client(), 8, spec, policy, stop)
        server = builder.make_inference_server(policy, spec, adder,
                                               InferenceConfig(max_envs=8), Counter())
        server.connect("r", 8)
        unrolls_per_env = NUM_BATCHES * BATCH_SIZE // 8
        EnvRunner(make_env, 8, seed=0).run(lambda b: server.step("r", b),
                                           max_steps=unrolls_per_env * UNROLL_LENGTH + 1)
        dataset = make_dataset(f"localhost:{replay.port}", builder.table, BATCH_SIZE)
        batches = [tree.map_structure(lambda x: x.numpy(), sample.data)
                   for sample in dataset.take(NUM_BATCHES)]
    finally:
        stop.set()
        if server is not None:
            server.close()
        if adder is not None:
            adder.close()  # its writer's stream, while the replay is up
        replay.stop()
    assert len(batches) == NUM_BATCHES
    return spec, batches


def _scaled_rewards(batch: dict, scale: float) -> dict:
    return {**batch, unrolls.REWARD: batch[unrolls.REWARD] * scale}


def _network(spec: EnvironmentSpec, config: VTraceConfig,
             like: PolicyValueNetwork | None = None) -> PolicyValueNetwork:
    network = VTraceBuilder(config).make_networks(spec)
    if like is not None:  # the same weights, for learners that must start alike
        for variable, source in zip(network.variables, like.variables, strict=True):
            variable.assign(source)
    return network


def _learner(network: PolicyValueNetwork, batches: list[dict],
             config: VTraceConfig) -> VTraceLearner:
    """A learner whose dataset gives `batches` in order, forever."""
    dataset = tf.data.Dataset.from_tensor_slices(
        tree.map_structure(lambda *xs: np.stack(xs), *batches)).repeat()
    return VTraceLearner(network, dataset.map(lambda data: reverb.ReplaySample((), data)),
                         config)


# ---------------------------------------------------------------------- config validation


def test_defaults_leave_the_learner_as_it_was():
    c = VTraceConfig()
    assert (c.value_normalization, c.kl_target, c.num_minibatches) == (None, None, 1)


@pytest.mark.parametrize("options, message", [
    ({"value_normalization": "popart2"}, "value_normalization must be one of"),
    ({"value_normalization_decay": 1.0}, "value_normalization_decay"),
    ({"value_normalization_decay": 0.0}, "value_normalization_decay"),
    ({"kl_target": 0.0}, "kl_target must be > 0"),
    ({"min_learning_rate": 1e-2, "max_learning_rate": 1e-3}, "min_learning_rate"),
    ({"min_learning_rate": 0.0}, "min_learning_rate"),
    ({"kl_target": 0.01, "learning_rate": 0.1}, r"within \[min_learning_rate"),
    ({"kl_adapt_factor": 1.0}, "kl_adapt_factor"),
    ({"num_minibatches": 3}, "divide batch_size"),
    ({"num_minibatches": 0}, "num_minibatches"),
    ({"observation_normalization": True, "torso": "nature_cnn"}, "vector observations"),
    ({"observation_clip": 0.0}, "observation_clip"),
    ({"ppo_proximal": "old"}, "ppo_proximal must be one of"),
    ({"ppo_proximal": "batch_start", "ppo_clip": None}, "set ppo_clip"),
])
def test_config_validation_of_the_tuning_fields(options, message):
    with pytest.raises(ValueError, match=message):
        VTraceConfig(batch_size=16, **options)


def test_valid_tuning_configs_are_accepted():
    VTraceConfig(batch_size=16, num_minibatches=4, kl_target=0.01,
                 value_normalization="popart", value_normalization_decay=0.999)
    # Out of [min, max] is fine while nothing adapts the learning rate.
    VTraceConfig(learning_rate=0.1, value_normalization="running")


# ---------------------------------------------------------------------- value normalization


def _known_statistics(normalizer: ValueNormalizer, mean: float, std: float) -> None:
    normalizer.first_moment.assign(mean)
    normalizer.second_moment.assign(mean**2 + std**2)
    normalizer.updates.assign(10_000)  # past the warm-up: the moving average proper


def test_popart_update_preserves_the_unnormalized_values_exactly():
    network = PolicyValueNetwork(3, (5,), hidden_sizes=(8,))
    popart = ValueNormalizer(0.9)
    _known_statistics(popart, 2.0, 0.5)
    obs = np.random.default_rng(0).normal(size=(6, 5)).astype(np.float32)

    def values() -> np.ndarray:
        (_, head), _ = network(obs, np.zeros(6, np.int32), ())
        return popart.unnormalize(head).numpy()

    before = values()
    # Targets far from the statistics, so mean and std both move a lot.
    targets = np.random.default_rng(1).normal(300.0, 80.0, size=(5, 4)).astype(np.float32)
    popart.update(targets, preserve=network.value_head)
    assert popart.mean.numpy() == pytest.approx(0.9 * 2.0 + 0.1 * targets.mean(), rel=1e-5)
    assert popart.std.numpy() > 10 * 0.5
    np.testing.assert_allclose(values(), before, rtol=1e-5, atol=1e-4)

    # Not vacuous: "running" statistics move the values of unchanged head outputs.
    running = ValueNormalizer(0.9)
    _known_statistics(running, 2.0, 0.5)
    head = tf.constant([-1.0, 0.0, 1.0])
    running_before = running.unnormalize(head).numpy()
    running.update(targets)
    assert np.all(np.abs(running.unnormalize(head).numpy() - running_before) > 10.0)


def test_statistics_converge_to_the_mean_and_std_of_the_targets():
    rng = np.random.default_rng(0)
    normalizer = ValueNormalizer(0.99)
    first = rng.normal(5.0, 3.0, size=(8, 8)).astype(np.float32)
    normalizer.update(first)
    # Warm-up: the first update takes the first batch's statistics exactly.
    assert normalizer.mean.numpy() == pytest.approx(first.mean(), rel=1e-5)
    assert normalizer.std.numpy() == pytest.approx(first.std(), rel=1e-4)
    mask = np.ones((8, 8), np.float32)
    mask[:, 0] = 0.0
    for _ in range(400):
        targets = rng.normal(5.0, 3.0, size=(8, 8)).astype(np.float32)
        targets[:, 0] = 1e6  # masked rows: never counted
        normalizer.update(targets, mask)
    assert normalizer.mean.numpy() == pytest.approx(5.0, abs=0.15)
    assert normalizer.std.numpy() == pytest.approx(3.0, abs=0.15)
    assert int(normalizer.updates.numpy()) == 401
    # A batch without a valid row changes nothing.
    state = [v.numpy() for v in normalizer.variables]
    normalizer.update(targets, np.zeros_like(mask))
    for variable, value in zip(normalizer.variables, state, strict=True):
        assert variable.numpy() == value


def test_constant_targets_floor_the_std_instead_of_dividing_by_zero():
    normalizer = ValueNormalizer(0.99)
    normalizer.update(np.full((4, 4), 7.0, np.float32))
    assert normalizer.std.numpy() == pytest.approx(ValueNormalizer.STD_BOUNDS[0])
    assert np.isfinite(normalizer.normalize(tf.constant([7.0, 8.0])).numpy()).all()


def test_normalized_baseline_loss_does_not_depend_on_the_reward_scale(served):
    """Rewards x1000 with statistics x1000: values = mean + std * head and the V-trace
    targets scale by exactly 1000, the normalized targets not at all, so the baseline loss
    and the gradient are the same (advantages normalized per batch, so the policy term
    is scale-free too)."""
    spec, batches = served
    scale = 1000.0
    config = _config(value_normalization="popart", ppo_clip=None, normalize_advantages=True,
                     max_gradient_norm=None)
    reference = _network(spec, config)
    small = _learner(_network(spec, config, like=reference), batches[:1], config)
    large = _learner(_network(spec, config, like=reference),
                     [_scaled_rewards(batches[0], scale)], config)
    _known_statistics(small.value_normalizer, 0.5, 2.0)
    _known_statistics(large.value_normalizer, 0.5 * scale, 2.0 * scale)
    small_metrics, large_metrics = small.step(), large.step()
    for key in ("baseline_loss", "gradient_norm", "pg_loss", "explained_variance"):
        # abs: with normalized advantages the policy loss is a near-cancelling sum of
        # order-one float32 terms (~4e-5 here), whose rounding is ~1e-7 either way.
        assert large_metrics[key] == pytest.approx(small_metrics[key], rel=1e-3, abs=1e-6), key
    assert large_metrics["value_normalization_std"] == pytest.approx(
        scale * small_metrics["value_normalization_std"], rel=1e-4)


def test_from_fresh_statistics_the_normalized_baseline_loss_is_of_order_one(served):
    """The warm-up fits the statistics to the first batch: with rewards x1 or x1000 the
    first step's baseline loss is of order 1."""
    spec, batches = served
    config = _config(value_normalization="popart")
    reference = _network(spec, config)
    for data in (batches[0], _scaled_rewards(batches[0], 1000.0)):
        fresh = _learner(_network(spec, config, like=reference), [data], config)
        assert fresh.step()["baseline_loss"] < 5.0  # ~2 at both scales here


def test_without_normalization_the_baseline_loss_grows_with_the_reward_scale_squared(served):
    spec, batches = served
    scale = 1000.0
    plain = _config(ppo_clip=None, normalize_advantages=True, max_gradient_norm=None)
    reference = _network(spec, plain)
    small = _learner(_network(spec, plain, like=reference), batches[:1], plain).step()
    large = _learner(_network(spec, plain, like=reference),
                     [_scaled_rewards(batches[0], scale)], plain).step()
    # Measured here: 2.3 -> 1.7e6 (x0.74 * 1000^2), the gradient norm x890.
    assert 1e5 < large["baseline_loss"] / small["baseline_loss"] < 1e7
    assert large["gradient_norm"] / small["gradient_norm"] > 100


def test_learner_updates_statistics_once_per_step_from_the_targets(served):
    spec, batches = served
    config = _config(value_normalization="running", value_normalization_decay=0.5)
    learner = _learner(_network(spec, config), batches, config)
    metrics = learner.step()
    assert int(learner.value_normalizer.updates.numpy()) == 1
    assert metrics["value_normalization_std"] > ValueNormalizer.STD_BOUNDS[0]
    assert np.isfinite(metrics["loss"])
    learner.step()
    assert int(learner.value_normalizer.updates.numpy()) == 2


def _train(learner: VTraceLearner, steps: int) -> None:
    for _ in range(steps):
        assert learner.step()


def test_statistics_and_adapted_learning_rate_survive_a_checkpoint(served, tmp_path):
    spec, batches = served
    config = _config(value_normalization="popart", kl_target=1e-6)
    learner = _learner(_far_from_behaviour(spec, config), batches, config)
    _train(learner, 3)
    objects = learner.checkpoint_objects()
    assert objects["value_normalizer"] is learner.value_normalizer
    Checkpointer(objects, tmp_path).save()
    statistics = [v.numpy() for v in learner.value_normalizer.variables]
    assert learner.learning_rate < config.learning_rate  # adapted, so it is state to keep

    fresh = _learner(_network(spec, config), batches, config)
    assert Checkpointer(fresh.checkpoint_objects(), tmp_path).restore_latest()
    for variable, value in zip(fresh.value_normalizer.variables, statistics, strict=True):
        assert variable.numpy() == value
    assert fresh.learning_rate == pytest.approx(learner.learning_rate)
    assert fresh.num_steps == 3

    # save() / restore() carry them as well.
    other = _learner(_network(spec, config), batches, config)
    other.restore(learner.save())
    for variable, value in zip(other.value_normalizer.variables, statistics, strict=True):
        assert variable.numpy() == value
    assert other.learning_rate == pytest.approx(learner.learning_rate)

    # A learner without normalization saved no statistics: restoring it into one that
    # needs them is refused, not half done.
    plain = _config()
    plain_learner = _learner(_network(spec, plain), batches, plain)
    Checkpointer(plain_learner.checkpoint_objects(), tmp_path / "plain").save()
    # (its kl_target is unset too: it has no learning_rate of its own either)
    with pytest.raises(ValueError, match=r"does not fit this learner \(the checkpoint has "
                                         r"no \['learning_rate', 'value_normalizer'\]"):
        Checkpointer(_learner(_network(spec, config), batches, config).checkpoint_objects(),
                     tmp_path / "plain").restore_latest()
    with pytest.raises(ValueError, match="no value_normalizer"):
        other.restore(plain_learner.save())


# ---------------------------------------------------------------------- adaptive learning rate


def test_adapt_learning_rate_shrinks_and_grows_by_the_factor_within_the_bounds():
    rule = dict(kl_target=0.01, factor=1.5, min_learning_rate=1e-4, max_learning_rate=1e-2)
    lr, shrinking = 1e-3, []
    for _ in range(8):
        lr = adapt_learning_rate(lr, 0.05, **rule)  # above 2x the target
        shrinking.append(lr)
    expected = [max(1e-3 / 1.5**n, 1e-4) for n in range(1, 9)]
    np.testing.assert_allclose(shrinking, expected, rtol=1e-12)
    assert shrinking[-1] == 1e-4  # the floor, reached and kept

    lr, growing = 1e-3, []
    for _ in range(8):
        lr = adapt_learning_rate(lr, 0.001, **rule)  # below half the target
        growing.append(lr)
    np.testing.assert_allclose(growing, [min(1e-3 * 1.5**n, 1e-2) for n in range(1, 9)],
                               rtol=1e-12)
    assert growing[-1] == 1e-2  # the cap

    for kl in (0.005, 0.01, 0.02, math.nan):  # the dead band, its edges, and no measure
        assert adapt_learning_rate(1e-3, kl, **rule) == 1e-3


def _masked_kl(batch: dict, network: PolicyValueNetwork) -> float:
    """KL(mu || pi) over the valid rows of `batch`, from scratch in numpy."""
    obs = np.swapaxes(batch[unrolls.OBSERVATION], 0, 1)
    (logits, _), _ = network(obs.reshape(-1, obs.shape[-1]), np.zeros(obs.shape[0] * obs.shape[1],
                                                                       np.int32), ())
    pi = logits.numpy().reshape(*obs.shape[:2], -1)[:-1]
    mu = np.swapaxes(batch[unrolls.EXTRAS]["logits"], 0, 1)[:-1]
    valid = np.swapaxes(batch[unrolls.STEP_TYPE], 0, 1)[:-1] != 2  # not LAST

    def log_softmax(x):
        x = x.astype(np.float64) - x.max(-1, keepdims=True)
        return x - np.log(np.exp(x).sum(-1, keepdims=True))

    kl = (np.exp(log_softmax(mu)) * (log_softmax(mu) - log_softmax(pi))).sum(-1)
    return float(kl[valid].mean())


def _far_from_behaviour(spec: EnvironmentSpec, config: VTraceConfig) -> PolicyValueNetwork:
    """A network whose policy is far from the near-uniform one that acted: KL ~ 0.1-1."""
    network = _network(spec, config)
    head = network._policy_head.kernel
    head.assign(tf.random.stateless_normal(head.shape, seed=[3, 4]))
    return network


def test_kl_metric_is_the_behaviour_to_learner_kl_over_valid_rows(served):
    spec, batches = served
    config = _config()  # one gradient step: the KL it logs is from before its update
    network = _far_from_behaviour(spec, config)
    expected = _masked_kl(batches[0], network)
    metrics = _learner(network, batches, config).step()
    assert metrics["kl"] == pytest.approx(expected, rel=1e-4)
    assert expected > 1e-3


@pytest.mark.parametrize("kl_target, direction", [(1e-5, "shrinks"), (100.0, "grows")])
def test_learner_step_adapts_its_learning_rate_variable(served, kl_target, direction):
    spec, batches = served
    config = _config(kl_target=kl_target, learning_rate=1e-3, kl_adapt_factor=2.0)
    learner = _learner(_far_from_behaviour(spec, config), batches, config)
    first = learner.step()
    assert first["learning_rate"] == pytest.approx(1e-3)  # the one the step used
    expected = 5e-4 if direction == "shrinks" else 2e-3
    assert learner.learning_rate == pytest.approx(expected)
    assert learner.step()["learning_rate"] == pytest.approx(expected)
    # The optimizer applies the very variable that adapts.
    assert learner.checkpoint_objects()["optimizer"].learning_rate.numpy() == pytest.approx(
        learner.learning_rate)


def test_a_schedule_with_kl_target_anneals_the_cap_and_brings_the_rate_down_to_it(served):
    """With `kl_target` and `anneal_steps`, the KL adapts the rate under a cap that falls
    from `max_learning_rate` to its final fraction; a rate above the cap comes down to it
    before the step (the KL, far under the target, would have doubled it each step)."""
    spec, batches = served
    config = _config(kl_target=100.0, kl_adapt_factor=2.0, learning_rate=1e-3,
                     max_learning_rate=4e-3, anneal_steps=4, final_learning_rate_fraction=0.25,
                     entropy_cost=0.01, final_entropy_fraction=0.5)
    learner = _learner(_far_from_behaviour(spec, config), batches, config)
    rows = [learner.step() for _ in range(6)]
    caps = [row["learning_rate_cap"] for row in rows]
    # 4e-3 x (0.25 + 0.75 x the part left of 4 steps), then the final 1e-3.
    assert caps == pytest.approx([4e-3, 3.25e-3, 2.5e-3, 1.75e-3, 1e-3, 1e-3])
    # Doubled by the KL after each step but never past the cap of the moment: 1e-3, 2e-3,
    # then 4e-3 capped to 3.25e-3 and brought down to the next step's 2.5e-3, and so on.
    assert [row["learning_rate"] for row in rows] == pytest.approx(
        [1e-3, 2e-3, 2.5e-3, 1.75e-3, 1e-3, 1e-3])
    assert learner.learning_rate == pytest.approx(1e-3)
    assert [row["entropy_cost"] for row in rows] == pytest.approx(
        [0.01, 0.00875, 0.0075, 0.00625, 0.005, 0.005])


def _largest_change(before: list[np.ndarray], variables: list[tf.Variable]) -> float:
    return max(float(np.abs(v.numpy() - b).max()) for b, v in zip(before, variables,
                                                                     strict=True))


def test_the_torso_steps_at_its_scaled_rate_and_the_heads_at_the_full_one(served, tmp_path):
    spec, batches = served
    config = _config(learning_rate=1e-3, torso_learning_rate_scale=0.25, kl_target=100.0,
                     kl_adapt_factor=2.0, max_learning_rate=1e-2)
    network = _network(spec, config)
    torso = network.torso_variables
    torso_refs = {v.ref() for v in torso}
    heads = [v for v in network.trainable_variables if v.ref() not in torso_refs]
    assert torso and heads
    before_torso, before_heads = [v.numpy() for v in torso], [v.numpy() for v in heads]
    learner = _learner(network, batches, config)
    assert learner.step()
    # Adam's first step moves each weight by at most its rate (exactly, where the
    # gradient is far above epsilon): the torso's is a quarter of the heads'.
    assert _largest_change(before_torso, torso) == pytest.approx(2.5e-4, rel=0.02)
    assert _largest_change(before_heads, heads) == pytest.approx(1e-3, rel=0.02)
    # The KL adapted the rate (doubled: KL far under 100); the torso's followed, scaled.
    objects = learner.checkpoint_objects()
    assert learner.learning_rate == pytest.approx(2e-3)
    assert objects["torso_optimizer"].learning_rate.numpy() == pytest.approx(5e-4)

    Checkpointer(objects, tmp_path).save()
    fresh = _learner(_network(spec, config), batches, config)
    assert Checkpointer(fresh.checkpoint_objects(), tmp_path).restore_latest()
    assert fresh.checkpoint_objects()["torso_optimizer"].learning_rate.numpy() == (
        pytest.approx(5e-4))
    other = _learner(_network(spec, config), batches, config)
    other.restore(learner.save())
    for mine, theirs in zip(other.checkpoint_objects()["torso_optimizer"].variables,
                            objects["torso_optimizer"].variables, strict=True):
        np.testing.assert_array_equal(mine.numpy(), theirs.numpy())
    plain = _config()
    plain_learner = _learner(_network(spec, plain), batches, plain)
    with pytest.raises(ValueError, match="no torso_optimizer"):
        other.restore(plain_learner.save())
    # A checkpoint of a run without the split: the refusal names the object it lacks.
    Checkpointer(plain_learner.checkpoint_objects(), tmp_path / "plain").save()
    with pytest.raises(ValueError,
                       match=r"the checkpoint has no \['learning_rate', 'torso_optimizer'\]"):
        Checkpointer(fresh.checkpoint_objects(), tmp_path / "plain").restore_latest()
    # ... and a run with it, restored into one without: the objects it holds in excess.
    with pytest.raises(ValueError, match=r"it holds \['learning_rate', 'torso_optimizer'\]"):
        Checkpointer(plain_learner.checkpoint_objects(), tmp_path).restore_latest()
    with pytest.raises(ValueError, match="torso_learning_rate_scale must be > 0"):
        _config(torso_learning_rate_scale=0.0)


# ---------------------------------------------------------------------- minibatches


@pytest.mark.parametrize("num_minibatches", [1, 4])
def test_each_step_takes_epochs_times_minibatches_gradient_steps(served, num_minibatches):
    spec, batches = served
    config = _config(sgd_steps_per_batch=2, num_minibatches=num_minibatches)
    learner = _learner(_network(spec, config), batches, config)
    optimizer = learner.checkpoint_objects()["optimizer"]
    for step in (1, 2):
        metrics = learner.step()
        assert int(optimizer.iterations.numpy()) == step * 2 * num_minibatches
        assert metrics["batch_reuse"] == 2.0
        assert all(np.isfinite(v) for v in metrics.values())


def test_minibatches_partition_the_batch_and_reshuffle_per_seed():
    def draw(step: int, epoch: int) -> list[list[int]]:
        seed = tf.constant([step, epoch], tf.int64)
        return [m.numpy().tolist() for m in minibatch_indices(8, 4, seed)]

    parts = draw(0, 0)
    assert [len(p) for p in parts] == [2, 2, 2, 2]
    assert sorted(sum(parts, [])) == list(range(8))  # every unroll once per epoch
    assert draw(0, 0) == parts  # a function of the seed: nothing random to checkpoint
    orders = {tuple(sum(draw(s, e), [])) for s in range(3) for e in range(3)}
    assert len(orders) > 1


@pytest.mark.parametrize("options, logged", [
    ({"value_normalization": "popart"}, {"value_normalization_mean", "value_normalization_std"}),
    # The proximal logits' own chunked pass, each chunk with its unrolls' LSTM states.
    ({"ppo_proximal": "batch_start"}, {"step_kl"}),
])
def test_the_options_train_an_lstm_on_unrolls_served_by_central_inference(options, logged):
    config = VTraceConfig(unroll_length=5, batch_size=4, queue_size=32, hidden_sizes=(16,),
                          kl_target=0.01, num_minibatches=2, sgd_steps_per_batch=1,
                          lstm_size=8, **options)
    with _learner_on_served_unrolls(config, unrolls_per_env=2) as (_, _, _, learner, _):
        metrics = {}
        for _ in range(3):
            metrics = learner.step() or metrics
        assert metrics and all(np.isfinite(v) for v in metrics.values())
        assert {"kl", *logged} <= set(metrics)


# ---------------------------------------------------------------------- observation normalization


def test_observation_statistics_are_those_of_every_row_seen_whatever_the_batches():
    rng = np.random.default_rng(0)
    # Features of very different scales and offsets, as a vector task's are.
    rows = rng.normal([1e3, -2.0, 0.0], [50.0, 0.01, 1.0], size=(70, 3))
    normalizer = ObservationNormalizer([3], clip=100.0)
    assert np.allclose(normalizer.normalize(rows[:2]).numpy(), np.clip(rows[:2], -100, 100),
                       rtol=1e-6)  # before any update: mean 0, variance 1
    normalizer.update(rows[:1])
    normalizer.update(rows[1:40])
    masked = np.concatenate([rows[40:], np.full((5, 3), 1e9)])  # masked rows count for nothing
    normalizer.update(masked, mask=np.r_[np.ones(30), np.zeros(5)])
    normalizer.update(np.zeros((0, 3)))  # an empty batch changes nothing
    assert normalizer.count.numpy() == 70
    np.testing.assert_allclose(normalizer.mean.numpy(), rows.mean(0), rtol=1e-10)
    np.testing.assert_allclose(normalizer.variance.numpy(), rows.var(0), rtol=1e-9)
    standardized = normalizer.normalize(rows).numpy()
    np.testing.assert_allclose(standardized.mean(0), 0.0, atol=1e-5)
    np.testing.assert_allclose(standardized.std(0), 1.0, rtol=1e-4)  # eps in the variance
    far = normalizer.normalize(rows.mean(0, keepdims=True) + 1e6).numpy()
    assert far.tolist() == [[100.0, 100.0, 100.0]]  # clipped


def test_learner_folds_each_batchs_observations_into_the_networks_statistics(served):
    spec, batches = served
    config = _config(observation_normalization=True, observation_clip=5.0)
    network = _network(spec, config)
    assert _network(spec, _config()).observation_normalizer is None  # off by default
    learner = _learner(network, batches, config)
    assert np.isfinite(learner.step()["loss"])
    learner.step()
    seen = np.concatenate([b[unrolls.OBSERVATION][:, :-1].reshape(-1, *spec.observations.shape)
                           for b in batches[:2]])
    normalizer = network.observation_normalizer
    assert normalizer.count.numpy() == len(seen) == 2 * BATCH_SIZE * UNROLL_LENGTH
    np.testing.assert_allclose(normalizer.mean.numpy(), seen.mean(0), rtol=1e-6, atol=1e-9)

    # The statistics are network variables: a policy's copy (get_variables) and a restored
    # learner read observations exactly as the learner does.
    copy = _network(spec, config)
    for variable, value in zip(copy.variables, learner.get_variables()[0], strict=True):
        variable.assign(value)
    observation = tf.constant(seen[:3])
    no_action, state = tf.zeros([3], tf.int32), network.initial_state(3)
    np.testing.assert_array_equal(copy(observation, no_action, state)[0][0].numpy(),
                                  network(observation, no_action, state)[0][0].numpy())
    restored = _learner(_network(spec, config), batches, config)
    restored.restore(learner.save())
    assert restored._network.observation_normalizer.count.numpy() == len(seen)


def test_a_schedule_without_anneal_steps_ends_with_the_run_budget():
    config = VTraceConfig(unroll_length=10, batch_size=4, queue_size=8,
                          anneal_over_budget=True)
    # 40 agent steps per learner step: a 10,000-step budget is 250 learner steps.
    assert config.for_budget(10_000).anneal_steps == 250
    assert config.for_budget(10).anneal_steps == 1
    explicit = VTraceConfig(unroll_length=10, batch_size=4, queue_size=8,
                            anneal_over_budget=True, anneal_steps=7)
    assert explicit.for_budget(10_000) == explicit
    constant = VTraceConfig(unroll_length=10, batch_size=4, queue_size=8)
    assert constant.for_budget(10_000) == constant  # nothing to anneal


def test_train_anneals_a_preset_over_its_steps():
    from launch.commands import cli

    args = cli.build_parser().parse_args(
        ["train", "--agent", "vtrace", "--env", "gym:CartPole-v1", "--preset", "minatar",
         "--steps", "1024000"])
    config = cli.make_experiment(args).builder.config
    assert config.anneal_steps == 1024000 // (32 * 32)
    assert config.final_learning_rate_fraction == 0.0


def test_each_vtrace_preset_states_its_gradient_steps_per_sample():
    """The presets' docstrings quote their gradient work per agent step; the configs they
    build must do what the docstrings say (PPO's 16 per 1,024 for atari_ppo)."""
    from seed_agents.agents.vtrace import presets
    from seed_agents.utils.overrides import parse_overrides

    counts = {}
    for name, preset in presets.VTRACE_PRESETS.items():
        config = parse_overrides(VTraceConfig, preset)
        counts[name] = (config.gradient_steps_per_learner_step,
                        config.samples_per_learner_step)
    assert counts == {"atari_ppo": (16, 1024), "atari_ppo_large": (32, 7680),
                      "atari_ppo_resnet": (32, 7680), "atari_cpu": (2, 128),
                      "minatar": (4, 1024)}
    assert "16 gradient steps per 1,024 agent steps" in _preset_docstring(presets, "ATARI_PPO")
    assert "32 gradient steps per 7,680 agent steps" in _preset_docstring(presets,
                                                                          "ATARI_PPO_LARGE")
    assert "2 gradient steps per 128 agent steps" in _preset_docstring(presets, "ATARI_CPU")
    assert "4 per 1,024 agent steps" in _preset_docstring(presets, "MINATAR")
    config = parse_overrides(VTraceConfig, presets.ATARI_PPO)
    # Minibatches are whole unrolls: 8 of the 32 per gradient step.
    assert config.batch_size // config.num_minibatches == 8
    large = parse_overrides(VTraceConfig, presets.ATARI_PPO_LARGE)
    # The large preset is atari_ppo but for the batch: 30 whole unrolls per gradient step.
    assert large.batch_size // large.num_minibatches == 30
    assert dataclasses.replace(large, batch_size=32, queue_size=96, num_minibatches=4) == config
    # The deep-torso preset is the large one but for its torso: what its docstring says.
    resnet = parse_overrides(VTraceConfig, presets.ATARI_PPO_RESNET)
    assert resnet.torso == "impala_resnet"
    assert dataclasses.replace(resnet, torso="nature_cnn") == large
    assert "`ATARI_PPO_LARGE` with IMPALA's deep torso" in _preset_docstring(
        presets, "ATARI_PPO_RESNET")


def _preset_docstring(module, name: str) -> str:
    """The string literal that follows `name = (...)` in the module's source."""
    import ast
    import inspect

    body = ast.parse(inspect.getsource(module)).body
    for node, following in zip(body, body[1:], strict=False):
        targets = getattr(node, "targets", None) or [getattr(node, "target", None)]
        if any(getattr(t, "id", None) == name for t in targets):
            return " ".join(following.value.value.split())
    raise AssertionError(f"{name} has no docstring")


# ---------------------------------------------------------------------- proximal policy


def _acted_by(batch: dict, network: PolicyValueNetwork) -> dict:
    """`batch` as if `network` had acted it: its behaviour logits are the network's own
    (no policy lag)."""
    obs = batch[unrolls.OBSERVATION]
    (logits, _), _ = network(obs.reshape(-1, obs.shape[-1]),
                             np.zeros(obs.shape[0] * obs.shape[1], np.int32), ())
    extras = {**batch[unrolls.EXTRAS],
              "logits": logits.numpy().reshape(*obs.shape[:2], -1)}
    return {**batch, unrolls.EXTRAS: extras}


def test_without_lag_the_proximal_policy_is_the_behaviour_one(served):
    """With the batch acted by the learner's own variables, pi_prox = mu: the decoupled
    objective is APPO's, and both learners take the same steps."""
    spec, batches = served
    options = {"ppo_clip": 0.1, "sgd_steps_per_batch": 2, "num_minibatches": 2}
    start = _network(spec, _config(**options))
    acted = [_acted_by(batches[0], start)]
    variables = []
    for proximal in ("behaviour", "batch_start"):
        config = _config(ppo_proximal=proximal, **options)
        network = _network(spec, config, like=start)
        metrics = _learner(network, acted, config).step()
        assert metrics["kl"] > 0.0  # the first epoch moved the policy
        variables.append([v.numpy() for v in network.variables])
    assert "step_kl" in metrics and metrics["step_kl"] > 0.0
    for appo, decoupled in zip(*variables, strict=True):
        np.testing.assert_allclose(decoupled, appo, rtol=1e-4, atol=1e-7)


def test_a_lagging_batch_is_clipped_from_the_learners_policy_not_the_stale_one(served):
    """Far from the policy that acted (a long lag), APPO's ratios pi/mu start outside the
    clip's band; the batch_start ratios pi/pi_prox start at 1, and the adaptive rate
    reads this step's own move (0 before its first update) instead of the lag."""
    spec, batches = served
    options = {"ppo_clip": 0.1, "kl_target": 1e-5, "learning_rate": 1e-3,
               "kl_adapt_factor": 2.0}
    appo_config = _config(**options)
    far = _far_from_behaviour(spec, appo_config)
    decoupled_config = _config(ppo_proximal="batch_start", **options)
    decoupled = _learner(_network(spec, decoupled_config, like=far), batches,
                         decoupled_config)
    appo = _learner(far, batches, appo_config)
    appo_metrics, decoupled_metrics = appo.step(), decoupled.step()
    assert appo_metrics["clip_fraction"] > 0.5
    assert decoupled_metrics["clip_fraction"] == 0.0  # one step: its metrics are before it
    assert decoupled_metrics["step_kl"] == pytest.approx(0.0, abs=1e-6)
    assert decoupled_metrics["kl"] == pytest.approx(appo_metrics["kl"], rel=1e-4)
    assert appo_metrics["kl"] > 1e-3
    assert appo.learning_rate == pytest.approx(5e-4)  # the lag's KL is over the target
    assert decoupled.learning_rate == pytest.approx(2e-3)  # this step's own move is not


def test_the_proximal_logits_are_the_learners_before_its_step(served):
    """Recorded in minibatch-sized chunks, pi_prox is the network's policy on every
    transition of the batch, in the batch's order."""
    spec, batches = served
    config = _config(ppo_clip=0.1, ppo_proximal="batch_start", num_minibatches=2)
    network = _network(spec, config)
    learner = _learner(network, batches, config)
    batch = tree.map_structure(tf.convert_to_tensor, batches[0])
    whole = learner._forward(batch).target_logits  # [T, B, A], the whole batch at once
    chunked = learner._proximal_logits(batch)  # [B, T, A], two chunks
    np.testing.assert_allclose(chunked.numpy(), np.swapaxes(whole.numpy(), 0, 1),
                               rtol=1e-5, atol=1e-6)
    metrics = learner.step()
    assert all(np.isfinite(v) for v in metrics.values())


# ---------------------------------------------------------------------- feature health


def test_the_learner_logs_whether_its_features_still_depend_on_the_observation(served):
    spec, batches = served
    config = _config()
    healthy = _learner(_network(spec, config), batches, config).step()
    assert 0.0 < healthy["live_features"] <= 1.0 and healthy["feature_std"] > 0.0
    dead = _network(spec, config)
    for layer in [*dead._torso, *dead._value_torso]:  # every ReLU below 0 for every input
        layer.bias.assign(tf.fill(layer.bias.shape, -1e3))
    collapsed = _learner(dead, batches, config).step()
    assert collapsed["live_features"] == 0.0 and collapsed["feature_std"] == 0.0
    assert collapsed["value_std"] < 1e-6  # the same value for every state
