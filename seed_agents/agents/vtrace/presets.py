"""Named V-trace settings for whole tasks, as the `key=value` strings `--set` takes.

Strings rather than a config object, so that the command line, the examples and the
benchmarks share one spelling: `seed-agents train --preset atari_cpu` (or `--set` each
string) builds the config `atari_cpu()` builds.
"""

from __future__ import annotations

from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.utils.overrides import parse_overrides

ATARI_CPU: tuple[str, ...] = (
    "torso=nature_cnn",
    "hidden_sizes=512,",
    "separate_value_torso=False",
    "precision=auto",
    "learning_rate=3e-4",
    "adam_epsilon=1e-5",
    "adam_beta2=0.99",
    "discount=0.99",
    "unroll_length=32",
    "batch_size=4",
    "queue_size=96",
    "sgd_steps_per_batch=2",
    "ppo_clip=0.2",
    "normalize_advantages=True",
    "entropy_cost=0.01",
    "reward_clip=1.0",
    "max_gradient_norm=40.0",
)
"""Atari on a few CPU cores (examples/atari_pong.py).

Learning costs more CPU than acting there (Nature CNN: ~0.6 ms per frame for a learner
step, ~0.2 ms for inference, ~0.3 ms for the emulator, in float32), so the settings spend
the learner's CPU on many small gradient steps: batches of 4 unrolls of 32 steps, two
steps on each (PPO's clip keeps the second close to the acting policy), one step per 64 env
steps. One step per 512 env steps (batches of 16, one step each) learned nothing of Pong in
10M frames. The learning rate is PPO's Atari scale rather than IMPALA's 6e-4 (with Adam at
6e-4 the first convolution's units all died within minutes), and advantages are normalized
per batch, so that the policy gradient is not drowned by the entropy term while Pong's
rewards are rare. The torso's precision is "auto": bfloat16 where the hardware computes it
natively (~40% less CPU per frame), float32 elsewhere (emulated bfloat16 made learning 8x
slower on an AVX2-only CPU). Rewards are clipped to [-1, 1]. The queue holds more than the
64 unrolls that lockstep runners complete at once, so that a burst of them never blocks
acting.
"""


def atari_cpu() -> VTraceConfig:
    """The config of `ATARI_CPU`."""
    return parse_overrides(VTraceConfig, ATARI_CPU)
