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


ATARI: tuple[str, ...] = (
    "torso=nature_cnn",
    "hidden_sizes=512,",
    "lstm_size=256",
    "head_hidden_size=256",
    "precision=auto",
    "burn_in=8",
    "trace_length=32",
    "sequence_period=16",
    "n_step=5",
    "discount=0.997",
    "value_rescaling_epsilon=1e-3",
    "learning_rate=2.5e-4",
    "adam_epsilon=1e-5",
    "batch_size=8",
    "target_update_period=100",
    "max_gradient_norm=40.0",
    "replay_size=40000",
    "min_replay_size=1250",
    "samples_per_insert=2",
    "num_eval_envs=8",
    "eval_epsilon=0.01",
)
"""Atari (`atari:<game>`, 84x84x4 frames) on a few CPU cores: R2D2's algorithm, its sizes
cut to the CPU.

Kept from the paper (Kapturowski et al. 2019): 5-step double-Q targets with the value
rescaling h and unclipped rewards, discount 0.997, Adam, prioritized replay (alpha 0.9,
beta 0.6, eta 0.9 as the config's defaults), Ape-X's per-environment epsilons, the Nature
CNN before the LSTM and dueling heads.

Cut for two cores: a 256-unit LSTM after a 512-unit layer (paper: 512 LSTM units on the
CNN's 3,136 outputs: four times the recurrent cost per row), sequences of 32 trained rows
after a burn-in of 8, a new one every 16 steps (paper: 80 after 40, every 40), and a
replay of 40,000 sequences, 640K env steps (2.56M frames; paper: ~4M env steps) from 1,250
sequences (20,000 env steps, Dopamine's warm-up) on.

Many small updates rather than the paper's few large ones: 8 sequences per learner step
(paper: 64), one learner step per 64 env steps, the target copied every 100 learner steps
(6,400 env steps; Dopamine's DQN: every 8,000), Adam at 2.5e-4 with epsilon 1e-5 (paper:
1e-4 and 1e-3). With the paper's values (32 sequences a step) sticky Pong learned nothing
in 5.25M frames (seed 1, 100-game mean -20.77): the run's Adam moments showed why, the
square roots of the second moments ~2-8e-5 against epsilon 1e-3, so each update moved a
weight ~500 times less than the learning rate says. Epsilon 1e-5 alone: still -20.54 at
2.94M frames (2,778 updates). With 8 sequences a step and 2.5e-4 as well, the exploring
environments' mean left random play's within 1M frames (-18.76 at 1.63M frames, 6,000
updates). See docs/atari.md.

The replay ratio is the lever on two cores: each sequence is sampled twice
(`samples_per_insert=2`), **4 trained rows per env step** (2 x 32 rows per 16 new steps),
half of DQN's and Rainbow's 8 (a batch of 32 every 4 env steps), about the learner work
per env step of `atari_ppo` (4 epochs over each sample). Eight environments (of
`learn_pong.py`'s 64) act with epsilon 0.01, Dopamine's training epsilon, and their
returns are the score reported against Dopamine's curves; their experience stays out of
replay and their steps out of the frame count.
"""


R2D2_PRESETS: dict[str, tuple[str, ...]] = {"minatar": MINATAR, "atari": ATARI}
"""The presets by the name `--preset` takes."""
