"""Learner shells: everything a learner does but its math.

Subclass the shell named for what the batches hold, `TransitionLearner` (n-step
transitions: DQN, SAC, D4PG, the offline agents) or `UnrollLearner` (fixed-length unrolls:
REINFORCE, on-policy queues; `time_major` turns [B, T] into [T, B]), with `_train(batch)
-> metrics` (a `tf.function`) and `checkpoint_objects()`. The shell (`BatchLearner`)
counts steps and samples, logs the metrics, keeps the step variable checkpoints carry,
hands out the network's variables, and returns {} when no batch came in time (`Batches`),
so the learner's loop sees a stop. `minimize` takes one clipped optimizer step; `built`
makes an optimizer's slots before the first trace. V-trace and R2D2 implement
`seed_agents.core.Learner` directly (epochs of minibatches; priorities).
"""

from seed_agents.learning.batches import Batches
from seed_agents.learning.gradients import clip_gradients, minimize
from seed_agents.learning.optimizers import built
from seed_agents.learning.shell import BatchLearner
from seed_agents.learning.transitions import TransitionLearner
from seed_agents.learning.unrolls import UnrollLearner, time_major

__all__ = ["BatchLearner", "Batches", "TransitionLearner", "UnrollLearner", "built",
           "clip_gradients", "minimize", "time_major"]
