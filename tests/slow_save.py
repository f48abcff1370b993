"""An agent whose checkpoints take a minute to save: the slow save of the stop tests.

`SlowSaveDQN` is the DQN example with one more checkpointed object, `SlowToSave`, whose
serialization sleeps inside the save (a `tf.py_function`, so it sleeps whether the save
runs eagerly or traced). Named by import path: `--agent tests.slow_save:SlowSaveDQN`.
"""

from __future__ import annotations

import dataclasses
import time

import tensorflow as tf

from examples.dqn import DQNBuilder, DQNLearner

SAVE_SECONDS = 60.0


class SlowToSave(tf.Module):
    """Saves as one int64 tensor, produced after `seconds` of sleep."""

    def __init__(self, seconds: float):
        super().__init__(name="slow_to_save")
        self.seconds = seconds

    def _serialize_to_tensors(self):
        def slow():
            time.sleep(self.seconds)
            return tf.constant(0, tf.int64)

        return {"slow": tf.py_function(slow, [], tf.int64)}

    def _restore_from_tensors(self, restored_tensors):
        return tf.no_op()


class SlowSaveLearner(DQNLearner):
    def checkpoint_objects(self):
        return {**super().checkpoint_objects(), "slow": SlowToSave(SAVE_SECONDS)}


@dataclasses.dataclass
class SlowSaveDQN(DQNBuilder):
    def make_learner(self, networks, replay_address, counter=None, logger=None):
        return SlowSaveLearner(networks, self.make_dataset(replay_address), self.config,
                               counter=counter, logger=logger)
