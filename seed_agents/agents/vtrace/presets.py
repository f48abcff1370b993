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

Learning costs more CPU than acting there (Nature CNN: ~0.6 ms per frame for a learner step,
~0.2 ms for inference, ~0.3 ms for the emulator, in float32), so the settings spend the
learner's CPU on many small gradient steps: batches of 4 unrolls of 32 steps, two steps on
each (PPO's clip keeps the second close to the acting policy): **2 gradient steps per 128
agent steps** (one per 64, each on 128 samples). One step per 512 env steps (batches of 16,
one step each) learned nothing of Pong in 10M frames. The learning rate is PPO's Atari scale
rather than IMPALA's 6e-4 (with Adam at 6e-4 the first convolution's units all died within
minutes), and advantages are normalized per batch, so that the policy gradient is not
drowned by the entropy term while Pong's rewards are rare. The torso's precision is "auto":
bfloat16 where the hardware computes it natively (~40% less CPU per frame), float32
elsewhere (emulated bfloat16 made learning 8x slower on an AVX2-only CPU). Rewards are
clipped to [-1, 1]. The queue holds more than the 64 unrolls that lockstep runners complete
at once, so that a burst of them never blocks acting.
"""


ATARI_PPO: tuple[str, ...] = (
    "torso=nature_cnn",
    "hidden_sizes=512,",
    "separate_value_torso=False",
    "precision=auto",
    "learning_rate=1e-3",
    "torso_learning_rate_scale=0.25",
    "adam_epsilon=1e-5",
    "discount=0.99",
    "vtrace_lambda=0.95",
    "unroll_length=32",
    "batch_size=32",
    "queue_size=96",
    "sgd_steps_per_batch=4",
    "num_minibatches=4",
    "ppo_clip=0.1",
    "normalize_advantages=True",
    "entropy_cost=0.01",
    "baseline_cost=0.5",
    "reward_clip=1.0",
    "max_gradient_norm=0.5",
    "kl_target=0.01",
    "max_learning_rate=1e-3",
)
"""Atari with the settings and the counting of the sample-efficient anchors (CleanRL's
`ppo_atari.py`), and rl_games' adaptive learning rate as a brake only.

Gradient work per sample, as PPO's: each learner step sees 32 unrolls of 32 steps (1,024
samples, PPO's 8 envs x 128 steps) and takes 4 epochs x 4 minibatches of 8 unrolls (256
samples) = **16 gradient steps per 1,024 agent steps** (one per 64). Every unroll is sampled
once from the queue; V-trace with lambda 0.95 plays GAE's part while correcting for the
policy lag of the queue. Entropy 0.01, PPO's clip 0.1, value and advantage scale as in PPO
(normalized advantages, value cost 0.5, gradients clipped to norm 0.5) and clipped rewards.

Two learning rates: the heads' 1e-3 and the torso's a quarter of it, 2.5e-4 (CleanRL's
rate; `torso_learning_rate_scale=0.25`), neither annealed; the KL can only lower both
(rl_games' `lr_schedule: adaptive`, `kl_target=0.01`): after each learner step a KL
between the acting policy and the learner's above 0.02 divides them by 1.5 (not below
1e-6), one below 0.005 multiplies them back, up to the 1e-3 cap.

Why the torso has a rate of its own: at 1e-3 for the whole network the policy moves
early and Pong learns fast, but the torso's features die on games whose rewards are rare;
at 2.5e-4 for the whole network they live, and the policy barely moves for millions of
frames. Split, on games outside Atari-5 (`ale_v5`, the same seed per game, cores quiet):
sticky Pong (seed 6) at 3.87M frames -15.58, where 2.5e-4 throughout gave -17.96 and 1e-3
throughout -13.74; Venture (seed 1, 4 minutes) kept a live fraction of 0.29-0.55 at ~110
learner steps (0.21 at its lowest), near 2.5e-4 throughout (0.40-0.56; 0.32) and far from
1e-3 throughout (0.06-0.19; 0.03); Breakout (`fire=1`, seed 1, 4 minutes) 2.85 at 170K env
steps, 2.5e-4 throughout 2.49 at 166K. See docs/atari.md.

Why the torso's rate is 2.5e-4 and not 1e-3, as it was: with the cap at 1e-3 the rate rose to it
within a few learner steps wherever the policy barely moved (the KL stays under 0.005
while rewards are rare), and there Adam's full-size steps on noisy, normalized advantages
killed the torso's ReLUs one after another until the network's output no longer depended
on the screen (`live_features`, `seed_agents.networks.health`). Seen first on BattleZone
and NameThisGame (`ale_v5`): a random policy's score to 4M frames, `value_std` ~1e-8; in
BattleZone (seed 1, diagnosed there) the live fraction of the 512 torso features fell
from 0.5 to 0.1 within 90 learner steps (~0.4M frames), and by 1.8M frames every channel
of the third convolution was dead. The setting was chosen on games outside Atari-5, 4
minutes (~150 learner steps) each, `ale_v5`, seed 1: on Venture (rewards rare) the live
fraction at ~110 learner steps was 0.09-0.16 with the cap at 1e-3, 0.34 at 5e-4 and 0.54
at 2.5e-4 (0.40-0.70 throughout); Pong at 1e-3 kept ~0.2 and Breakout ~0.8, Frostbite
0.2-0.4. A brake on the live fraction itself (divide the rate when it falls under 0.1)
came too late on Venture and, the features staying low, drove the rate to its floor: not
kept. What the 1e-3 cap had bought: Pong without sticky actions at +18 within 5.03M and
6.32M frames (seeds 3 and 4; see docs/atari.md), where 2.5e-4 annealed to 0
took 7.95M on seed 1 and missed on seed 2; with 2.5e-4 held (not annealed) Pong is
expected between the two.

Why minibatches: with one gradient step per epoch (4 per 1,024 samples, `num_minibatches=1`)
Pong's policy had not moved after 4M frames (100-game mean -20.05, entropy 1.75 of the
uniform 1.79, the learner waiting for data 95-99% of the time); with PPO's 16 it passed 0
at 4.45M frames on the same seed. The learner is then the busy part of a 2-core run (the
runners wait on the full queue), at about 3,100 frames/s. See docs/atari.md for each
seed's curve.
"""


def _replaced(preset: tuple[str, ...], *changes: str) -> tuple[str, ...]:
    """`preset` with the fields of `changes` set to their values, in place: a preset sets
    each field once, so that it reads as the config it builds."""
    new = {item.split("=", 1)[0]: item for item in changes}
    unknown = set(new) - {item.split("=", 1)[0] for item in preset}
    if unknown:
        raise ValueError(f"the preset sets no {sorted(unknown)} to replace")
    return tuple(new.get(item.split("=", 1)[0], item) for item in preset)


ATARI_PPO_LARGE: tuple[str, ...] = _replaced(
    ATARI_PPO, "batch_size=240", "queue_size=480", "num_minibatches=8")
"""`ATARI_PPO` with Cleanba's samples per update, for games whose rewards are rare: the
preset `benchmarks/learn_atari5.py` runs the five games with.

Each learner step sees 240 unrolls of 32 steps (7,680 samples, Cleanba's PPO's update) and
takes 4 epochs x 8 minibatches of 30 unrolls (960 samples) = **32 gradient steps per 7,680
agent steps** (one per 240; `ATARI_PPO` takes one per 64, each on 256 samples). The same
gradient work per sample; each step averages 3.75 times more samples, and the queue of 480
unrolls keeps the policy lag under a learner step. Everything else is `ATARI_PPO`'s.

Why: with `ATARI_PPO`'s minibatches of 256 samples BattleZone (`ale_v5`, seed 1, diagnosed
there) kept a near-uniform policy and a random policy's score to 4M frames, every run. With
240 unrolls a step it learned: 17,770 at 10M frames with 4 minibatches of 1,920 samples,
15,720 with 8 of 960 as here (Rainbow's 20,209; one seed each). Under this preset the five
games at 10M frames give an Atari-5 estimate of 41.7% (seed 1; Rainbow 43.1%, IQN 68.2%):
NameThisGame 5,684.3, DoubleDunk -14.72, Phoenix 3,874.5, Qbert 2,778.5. The number of
minibatches was chosen on sticky Pong (seed 6, outside Atari-5): 4 minibatches cost Pong
pace (-18.8 at 4.59M frames, where `ATARI_PPO` had -15.58 at 3.87M), 8 cost less (-15.55 at
4.46M). On an AMX CPU the learner had time to spare with these batches (busy ~0.6-0.7 of a
2-core run), so the runners set the pace (~5,100-5,300 frames/s there); on another AMX
machine (2026-12-07) the learner was the busy side on Pong (0.98) at the same frames/s,
and the queue's policy lag was 3-4 learner steps (~0.7 before). See docs/atari.md
(Atari-5).

The torso keeps its quarter rate under the larger batch: on Venture (seed 1, ~2,200
gradient steps) its live fraction held at 0.67-0.83 with 2.5e-4, fell to 0.35 and still
falling with 5e-4, and to 0.21-0.28 with 1e-3; 5e-4 was not faster on sticky Pong either
(seed 6: -18.84 at 4.32M frames, this preset -15.55 at 4.46M).
"""


ATARI_PPO_RESNET: tuple[str, ...] = _replaced(ATARI_PPO_LARGE, "torso=impala_resnet")
"""`ATARI_PPO_LARGE` with IMPALA's deep torso (`impala_resnet`: three sections of a 3x3
convolution, a max-pool and two residual blocks, 16/32/32 channels) where it has the Nature
CNN: the preset that learns sticky Pong furthest in 10M frames, at about 5 times the CPU a
frame. Everything else is `ATARI_PPO_LARGE`'s, the torso's quarter rate included: 32
gradient steps per 7,680 agent steps.

Why: the anchor nearest our algorithm, Cleanba's PPO (~+10 on sticky Pong at 10M frames),
runs this torso. On sticky Pong (`ale_v5`, 2-core Intel Xeon with AMX, bfloat16) it gave
**+5.38, +5.20 and +10.61 at 10M frames** (seeds 6, 7 and 8; 0 reached at 8.64M, 7.96M
and 6.93M; seed 8 +10 at 9.30M), where `ATARI_PPO_LARGE` gave +3.25 and +0.57 (seeds 7 and
8; 0 at 8.93M and 9.85M); it ran 2-6 points ahead of the Nature CNN on seed 7 from 3M
frames on and 8.5-10 points ahead on seed 8 from 7M on. Seed 6 is the one the large
preset's minibatches were chosen on; seeds 7 and 8 were never used for tuning. One run per
seed: all three short of Rainbow's 15.2. Its features stayed alive at the torso's 2.5e-4
(`live_features` 0.98-1.00 from 2M frames on).

What it costs: 1,817-1,862 CPU-core-seconds per million frames (the Nature CNN's ~365),
~1,000-1,060 frames/s on two cores with the learner the busy side, so 10M frames of one game
take ~2.7 hours there. Not run on the other Atari-5 games. See docs/atari.md.
"""


MINATAR: tuple[str, ...] = (
    "torso=minatar",
    "hidden_sizes=128,",
    "separate_value_torso=False",
    "learning_rate=5e-3",
    "adam_epsilon=1e-5",
    "discount=0.99",
    "vtrace_lambda=0.95",
    "unroll_length=32",
    "batch_size=32",
    "queue_size=96",
    "sgd_steps_per_batch=4",
    "ppo_clip=0.2",
    "normalize_advantages=True",
    "entropy_cost=0.01",
    "baseline_cost=0.5",
    "max_gradient_norm=0.5",
    "value_normalization=popart",
    "final_learning_rate_fraction=0.0",
    "anneal_over_budget=True",
)
"""MinAtar (`minatar:<game>`, 10x10 object planes) with the MinAtar paper's network.

The network is the paper's (one 3x3 convolution of 16 channels, 128 units), shared by the
policy and the value as in the PPO anchors; a learner step sees 32 unrolls of 32 steps
(1,024 samples) and takes 4 gradient steps on them (**4 per 1,024 agent steps**, each on the
whole batch), with PPO's clip 0.2, GAE-like lambda 0.95, normalized advantages, gradients
clipped to norm 0.5 and entropy 0.01. Rewards are MinAtar's own (no clipping: they are small
integers). The learning rate is what MinAtar taught: on Breakout at 2M frames (seed 0), Adam
at 5e-4 ended at a 100-episode mean of 5.3 with the policy's entropy collapsed to ~0.1 nats
within 300K frames, 2.5e-3 at 15.0 and 5e-3 at 22.9: this small network wants a large step.
The value is learned on PopArt-normalized targets (`value_normalization=popart`; Space
Invaders' returns are ten times Breakout's) and the learning rate falls linearly to 0 over
the run's budget, as PPO's does: at 5M frames (2 seeds) Space Invaders went from 139.0
without the two to 320.8 with them, Asterix from 31.7 to 51.0. See docs/atari.md (MinAtar)
for the figures and what else was tried.
"""


VTRACE_PRESETS: dict[str, tuple[str, ...]] = {
    "atari_cpu": ATARI_CPU,
    "atari_ppo": ATARI_PPO,
    "atari_ppo_large": ATARI_PPO_LARGE,
    "atari_ppo_resnet": ATARI_PPO_RESNET,
    "minatar": MINATAR,
}
"""The presets by the name `--preset` takes."""


def atari_cpu() -> VTraceConfig:
    """The config of `ATARI_CPU`."""
    return parse_overrides(VTraceConfig, ATARI_CPU)
