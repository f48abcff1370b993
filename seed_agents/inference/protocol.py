"""What a runner sends to the inference server: the step results of its environments.

Kept free of TensorFlow and Reverb so that environment runners stay small.
"""

from __future__ import annotations

import dataclasses

import dm_env
import numpy as np

FIRST = np.uint8(dm_env.StepType.FIRST)
MID = np.uint8(dm_env.StepType.MID)
LAST = np.uint8(dm_env.StepType.LAST)


@dataclasses.dataclass(frozen=True)
class StepBatch:
    """The step results of one runner's K environments, in the order of its slots.

    Shapes: observation [K, *obs_shape] (the spec's dtype), reward/discount float32 [K],
    step_type uint8 [K]. `step_type` is a dm_env.StepType per environment: FIRST after a
    reset (reward 0, discount 1), MID, or LAST at the end of an episode (discount 0 on
    termination, 1 on truncation; the last observation is kept). The action answered for
    a LAST step is never executed: the runner resets that environment instead.
    """

    observation: np.ndarray
    reward: np.ndarray
    discount: np.ndarray
    step_type: np.ndarray
