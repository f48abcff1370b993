"""The actor-environment loop and the local-inference actor, on real environments."""

from __future__ import annotations

import threading

import numpy as np
import reverb

from seed_agents.actors import PolicyActor
from seed_agents.environment_loop import EnvironmentLoop
from seed_agents.envs import make_environment
from seed_agents.replay import UnrollAdder, UnrollWriter, queue_table, row_spec, unroll_signature
from seed_agents.replay import unrolls as u
from seed_agents.specs import make_environment_spec
from seed_agents.utils.counting import Counter
from tests.policies import CountingPolicy


def test_loop_runs_episodes_and_counts_steps():
    env = make_environment("fake:obs=2,len=7", seed=0)
    counter = Counter()
    loop = EnvironmentLoop(env, PolicyActor(CountingPolicy()), counter=counter)
    loop.run(num_episodes=3)
    assert counter.get_counts() == {"env_steps": 21, "episodes": 3}
    assert len(loop.episode_returns) == 3


def test_stop_event_ends_a_running_loop_from_another_thread():
    env = make_environment("fake:obs=2,len=1000000", seed=0)
    stop = threading.Event()
    loop = EnvironmentLoop(env, PolicyActor(CountingPolicy()), stop_event=stop)
    thread = threading.Thread(target=loop.run)
    thread.start()
    threading.Timer(0.2, stop.set).start()
    thread.join(10)
    assert not thread.is_alive()


def test_local_actor_writes_the_same_unroll_layout_as_the_server():
    env = make_environment("fake:obs=2,len=3,terminate=1", seed=0)
    spec = make_environment_spec(env)
    policy = CountingPolicy()
    signature = unroll_signature(spec, 4, policy.extras_spec, policy.state_spec)
    server = reverb.Server([queue_table("q", 100, signature)], port=None)
    client = server.localhost_client()
    writer = UnrollWriter(client, "q")
    try:
        adder = UnrollAdder(writer, 1, 4, row_spec(spec, policy.extras_spec), policy.state_spec)
        EnvironmentLoop(env, PolicyActor(policy, adder)).run(num_episodes=2)
        writer.flush()
        (item,) = [s.data for s in client.sample("q", emit_timesteps=False,
                                                  unpack_as_table_signature=True)]
        # Episode of 3 steps: FIRST, MID, MID, LAST, then the next episode's FIRST.
        assert item[u.STEP_TYPE].tolist() == [0, 1, 1, 2, 0]
        assert item[u.DISCOUNT].tolist() == [1, 1, 1, 0, 1]
        assert item[u.PREV_ACTION][1:4].tolist() == item[u.ACTION][0:3].tolist()
        np.testing.assert_array_equal(item[u.START_STATE][0], [0.0])
    finally:
        writer.close()  # before its server stops
        server.stop()
