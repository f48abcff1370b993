"""Frame stacks kept by the inference server, so that runners send one frame per step.

A pixel agent sees the last few frames stacked along the observation's last axis (Atari's
`[84, 84, 4]`). Stacked by the environment, every step carries the three frames the
server already has: 28 KB per Pong step instead of 7 KB, copied by the runner, the kernel
and gRPC on both sides. Stacked here (as SEED RL does on its learner), a runner's
environments make single frames (`atari:Pong,stack=1`) and the server pushes each into
its slot's stack before the policy sees it: the same observations as the environment's
own stacking, a quarter of the bytes on the wire.
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
from numpy.typing import DTypeLike


def frame_shape(stacked_shape: Sequence[int], depth: int) -> tuple[int, ...]:
    """The shape of one frame of a `depth`-deep stack of `stacked_shape`, e.g.
    ((84, 84, 4), 4) -> (84, 84, 1); raises ValueError when it does not divide."""
    shape = tuple(int(d) for d in stacked_shape)
    if depth < 1:
        raise ValueError(f"frame_stack must be >= 1, got {depth}.")
    if not shape or shape[-1] % depth:
        raise ValueError(f"an observation of shape {shape} is not a stack of {depth} frames "
                         "along its last axis")
    return (*shape[:-1], shape[-1] // depth)


class FrameStacks:
    """Each environment slot's last `depth` frames, the newest in the last channels.

    `push` is the whole interface: it shifts the named slots' stacks by one frame, writes
    the new frames last, and restarts (every frame the new one, as `AtariEnvironment` does
    after a reset) the slots whose step is an episode's first. Slots that form a
    contiguous ascending run, as a client's slots do whenever the server had such a run
    free (`InferenceServer._take_slots`), are shifted in place by one memmove and
    returned as a view; any other set is gathered, shifted and written back.
    """

    def __init__(self, num_slots: int, stacked_shape: Sequence[int], dtype: DTypeLike,
                 depth: int):
        self.frame_shape = frame_shape(stacked_shape, depth)
        self.depth = depth
        self._channels = self.frame_shape[-1]  # Channels of one frame.
        self._stacks = np.zeros((num_slots, *stacked_shape), dtype)

    def clear(self, slots: np.ndarray) -> None:
        """Forgets the slots' frames (a new owner's environments start from zeros)."""
        self._stacks[slots] = 0

    def push(self, slots: np.ndarray, frames: np.ndarray, first: np.ndarray) -> np.ndarray:
        """The slots' stacks with `frames` ([n, *frame_shape]) pushed: [n, *stacked_shape].

        A view of the storage when `slots` is a contiguous ascending run: valid until the
        next `push` of those slots (the server's policy step and adder copy what they keep).
        """
        n = len(slots)
        start = int(slots[0]) if n else 0
        contiguous = n > 0 and int(slots[-1]) == start + n - 1 and (
            n == 1 or bool((np.diff(slots) == 1).all()))
        stacks = self._stacks[start:start + n] if contiguous else self._stacks[slots]
        # One contiguous shift by a frame's channels moves every pixel's frames one down;
        # the last channels, which pick up the next pixel's oldest frame, are written
        # next. numpy copies a 1-d overlapping assignment forward without a temporary.
        flat = stacks.reshape(-1)
        flat[:-self._channels] = flat[self._channels:]
        stacks[..., -self._channels:] = frames
        if first.any():
            by_frame = stacks.reshape(n, *self.frame_shape[:-1], self.depth, self._channels)
            by_frame[first] = frames[first][..., None, :]
        if not contiguous:
            self._stacks[slots] = stacks
        return stacks
