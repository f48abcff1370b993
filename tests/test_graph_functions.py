"""`graph_function`: steps traced without AutoGraph, a per-minibatch step traced once."""

from __future__ import annotations

import collections

import numpy as np
import pytest
import tensorflow as tf

from seed_agents.agents.cql.config import CQLConfig
from seed_agents.agents.cql.learning import CQLLearner
from seed_agents.agents.cql.networks import CQLNetworks
from seed_agents.replay import transitions as tr
from seed_agents.utils.graph_functions import graph_function


def test_a_python_if_on_a_tensor_fails_when_traced_instead_of_being_rewritten():
    def step(x):
        if tf.reduce_sum(x) > 0:  # needs tf.cond without AutoGraph
            return x
        return -x

    with pytest.raises(TypeError, match="bool"):
        graph_function(step)(tf.ones(2))
    assert tf.function(step)(tf.ones(2)).numpy().tolist() == [1.0, 1.0]  # AutoGraph's


def _call_ops(graph: tf.Graph) -> list[str]:
    return [op.get_attr("f").name for op in graph.get_operations()
            if op.type in ("PartitionedCall", "StatefulPartitionedCall")]


def _inlined(function, *specs) -> bool:
    """Whether TF's optimizer may copy the function's body into each caller."""
    attr = function.get_concrete_function(*specs).function_def.attr
    return not ("_noinline" in attr and attr["_noinline"].b)


def test_a_step_called_per_minibatch_is_one_function_traced_once_and_not_copied():
    variable = tf.Variable(1.0)
    traces = []

    def gradient_step(x):
        traces.append(1)  # runs once per trace
        variable.assign_add(tf.reduce_sum(x))
        return variable * 2.0

    called = graph_function(gradient_step, inline=False)
    outer = graph_function(lambda x: [called(x[i:i + 1]) for i in range(3)])
    results = [r.numpy() for r in outer(tf.constant([1.0, 2.0, 3.0]))]
    assert results == [4.0, 8.0, 14.0]  # the steps ran in order on the variable
    assert len(traces) == 1
    names = _call_ops(outer.get_concrete_function(tf.TensorSpec([3])).graph)
    assert len(names) == 3 and len(set(names)) == 1  # three calls of one function
    assert not _inlined(called, tf.TensorSpec([1]))
    assert _inlined(graph_function(gradient_step), tf.TensorSpec([1]))  # the default


def _transitions(batch: int) -> tf.data.Dataset:
    rng = np.random.default_rng(0)
    size = 256
    data = {
        tr.OBSERVATION: rng.normal(size=(size, 2)).astype(np.float32),
        tr.ACTION: rng.integers(0, 2, size).astype(np.int32),
        tr.REWARD: rng.normal(size=size).astype(np.float32),
        tr.DISCOUNT: np.full(size, 0.9, np.float32),
        tr.NEXT_OBSERVATION: rng.normal(size=(size, 2)).astype(np.float32),
        tr.EXTRAS: {},
    }
    sample = collections.namedtuple("Sample", "data")
    return tf.data.Dataset.from_tensor_slices(data).repeat().batch(batch).map(sample)


def test_cql_copies_its_target_network_after_each_period_of_steps():
    config = CQLConfig(batch_size=16, hidden_sizes=(16,), target_update_period=3)
    networks = CQLNetworks((2,), 2, config.hidden_sizes)
    learner = CQLLearner(networks, _transitions(config.batch_size), config)

    def values(layer_variables):
        return [v.numpy().copy() for v in layer_variables]

    for step in range(6):
        target_before = values(networks.target_q.variables)
        learner.step()
        target = values(networks.target_q.variables)
        copied = (step + 1) % 3 == 0  # after the 3rd and the 6th step
        moved = any(not np.array_equal(a, b) for a, b in zip(target_before, target,
                                                                 strict=True))
        assert moved == copied, step
        same = all(np.array_equal(a, b) for a, b in zip(
            target, values(networks.q.variables), strict=True))
        assert same == copied, step
    with pytest.raises(ValueError, match="period"):
        learner.completes(0)
    learner.close()
