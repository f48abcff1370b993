"""Named R2D2 settings for whole tasks, as the `key=value` strings `--set` takes (see
`seed_agents.agents.vtrace.presets` for why strings)."""

from __future__ import annotations

MINATAR: tuple[str, ...] = (
    "torso=minatar",
    "hidden_sizes=128,",
    "lstm_size=128",
    "head_hidden_size=128",
    "burn_in=4",
    "trace_length=16",
    "sequence_period=8",
    "n_step=3",
    "discount=0.99",
    "learning_rate=2.5e-4",
    "adam_epsilon=1e-4",
    "batch_size=32",
    "target_update_period=1000",
    "replay_size=20000",
    "min_replay_size=1000",
    "samples_per_insert=4",
    "num_eval_envs=4",
)
"""MinAtar (`minatar:<game>`) with short sequences: R2D2 as the DQN-family learner on pixels.

The MinAtar paper's network (one 3x3 convolution of 16 channels, 128 units) before a
128-unit LSTM and dueling heads. Sequences of 16 trained steps after a burn-in of 4, a new
one every 8 steps (each step is trained in two), 3-step double-Q targets. DQN's scale where
it carries over: its learning rate (2.5e-4), a target network copied every 1,000 updates,
a replay of ~160K steps (20,000 sequences of 8 new steps), learning from 1,000 sequences
on. Each sequence is sampled 4 times: 8 trained transitions per env step, a quarter of
DQN's 32 (one batch of 32 per frame), which the CPU budget of a 5M-frame run allows.
Four environments act greedily and report the returns evaluation figures use.
"""


R2D2_PRESETS: dict[str, tuple[str, ...]] = {"minatar": MINATAR}
"""The presets by the name `--preset` takes."""
