"""The central inference server: one policy, many environments, batched.

Environment runners hand in the step results of their environments; the server batches
them across runners (`DynamicBatcher`), runs the policy once per batch on the learner's
own variables, and answers with actions. It keeps, per environment: the policy's recurrent
state, the previous action, the running episode return, and the unroll being assembled,
which goes to Reverb when full. Transports (in-process calls now, gRPC streams later) only
call `connect`, `step` and `disconnect`; they never see the policy or the replay.
"""

from __future__ import annotations

import dataclasses
import threading
import uuid
from collections import deque
from collections.abc import Sequence
from typing import Any

import numpy as np
import tree

from seed_agents.core import Policy
from seed_agents.inference.batcher import Callback, DynamicBatcher
from seed_agents.inference.frame_stacks import FrameStacks
from seed_agents.inference.protocol import FIRST, LAST, StepBatch
from seed_agents.replay import unrolls
from seed_agents.replay.adder import Adder
from seed_agents.specs import EnvironmentSpec
from seed_agents.utils.counting import Counter


@dataclasses.dataclass(frozen=True)
class InferenceConfig:
    """How the server batches and how many environments it can hold.

    Attributes:
      max_envs: environment slots preallocated (state, unroll buffers); connecting more
        environments than this fails with a clear error.
      max_batch_size: most environments in one policy call.
      max_wait_ms: longest a request waits for others to join its batch.
      active_window_ms: a batch closes early once every client that stepped within this
        window has a request waiting; a client silent for longer (a stalled or idle
        runner) no longer holds anyone's batch back (see `DynamicBatcher`).
      frame_stack: frames the server stacks per environment (`FrameStacks`): clients
        send one frame per step (the spec's observation with its last axis divided by
        this, e.g. `[84, 84, 1]` of `[84, 84, 4]`) and the policy, the adder and the
        recorder see the stacks. 1: clients send whole observations.
    """

    max_envs: int = 1024
    max_batch_size: int = 256
    max_wait_ms: float = 2.0
    active_window_ms: float = 1000.0
    frame_stack: int = 1

    def __post_init__(self):
        if self.max_envs < 1:
            raise ValueError(f"max_envs must be >= 1, got {self.max_envs}.")
        if self.max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {self.max_batch_size}.")
        if self.max_wait_ms < 0:
            raise ValueError(f"max_wait_ms must be >= 0, got {self.max_wait_ms}.")
        if self.active_window_ms <= 0:
            raise ValueError(f"active_window_ms must be > 0, got {self.active_window_ms}.")
        if self.frame_stack < 1:
            raise ValueError(f"frame_stack must be >= 1, got {self.frame_stack}.")


class EpisodeStats:
    """Thread-safe record of finished episodes: count, returns, lengths.

    `save` and `restore` carry the count and the window across a restart (a learner
    checkpoint keeps them), so a resumed run's mean return continues where it was.
    """

    def __init__(self, window: int = 100):
        self._lock = threading.Lock()
        self._returns: deque[float] = deque(maxlen=window)
        self._lengths: deque[int] = deque(maxlen=window)
        self.episodes = 0

    def save(self) -> dict[str, Any]:
        """The count and the window's returns and lengths, as JSON-able values."""
        with self._lock:
            return {"episodes": self.episodes, "returns": list(self._returns),
                    "lengths": list(self._lengths)}

    def restore(self, saved: dict[str, Any]) -> None:
        """Replaces the count and the window with those `save` returned."""
        with self._lock:
            self.episodes = int(saved["episodes"])
            self._returns.clear()
            self._lengths.clear()
            self._returns.extend(float(r) for r in saved["returns"])
            self._lengths.extend(int(n) for n in saved["lengths"])

    def record(self, returns: np.ndarray, lengths: np.ndarray) -> None:
        with self._lock:
            self._returns.extend(returns.tolist())
            self._lengths.extend(lengths.tolist())
            self.episodes += len(returns)

    def summary(self, prefix: str = "") -> dict[str, float]:
        """Episodes so far and the mean return and length over the window; keys get
        `prefix` (e.g. "eval_")."""
        with self._lock:
            n = len(self._returns)
            return {
                f"{prefix}episodes": self.episodes,
                f"{prefix}mean_return": float(np.mean(self._returns)) if n else float("nan"),
                f"{prefix}mean_length": float(np.mean(self._lengths)) if n else float("nan"),
                f"{prefix}window_episodes": n,
            }


@dataclasses.dataclass(eq=False)
class _Client:
    client_id: str
    slots: np.ndarray
    run_id: str


class InferenceServer:
    """Serves a `Policy` to many environments and assembles their unrolls.

    Thread-safety: `connect`, `step` and `disconnect` may be called from any number of
    threads; a given client has one `step` in flight at a time. Per-environment state is
    touched only on the batcher's thread. Slots of a client that disconnects are free at
    once: a request of it still queued is answered without touching them, and a slot's
    partial unroll is discarded on the batcher thread before its new owner's first row.
    """

    def __init__(
        self,
        policy: Policy,
        env_spec: EnvironmentSpec,
        adder: Adder | None,
        config: InferenceConfig | None = None,
        counter: Counter | None = None,
        stats: EpisodeStats | None = None,
        eval_stats: EpisodeStats | None = None,
    ):
        self._policy = policy
        # Optional on a policy that is not a `core.Policy` (duck-typed ones work too).
        self._observe_counts = getattr(policy, "observe_counts", None)
        # The policy sees the counts before the first batch too: a resumed run's learner
        # restores the counter after building this server, and a schedule of the run's
        # env steps must act on the first batch from there, not from 0.
        self._counts_unseen = self._observe_counts is not None
        self._spec = env_spec
        self._adder = adder
        self._config = config = config or InferenceConfig()
        self._counter = counter or Counter()
        self.stats = stats or EpisodeStats()
        self.eval_stats = eval_stats or EpisodeStats()
        n = config.max_envs
        self._num_eval = policy.num_evaluation_envs
        if not 0 <= self._num_eval < n:
            raise ValueError(
                f"The policy has {self._num_eval} evaluation environments; it needs "
                f"0 <= num_evaluation_envs < max_envs={n} to leave some for training."
            )
        self._obs_dtype = np.dtype(env_spec.observations.dtype)
        self._frames = (FrameStacks(n, env_spec.observations.shape, self._obs_dtype,
                                    config.frame_stack) if config.frame_stack > 1 else None)
        # What clients send: the spec's observation, or one frame of it.
        self._obs_shape = (self._frames.frame_shape if self._frames is not None
                           else tuple(env_spec.observations.shape))
        self._state = tree.map_structure(np.copy, policy.initial_state(n))
        self._initial_state = policy.initial_state(1)
        self._prev_action = np.zeros((n, *env_spec.actions.shape), env_spec.actions.dtype)
        self._episode_return = np.zeros(n, np.float64)
        self._episode_length = np.zeros(n, np.int64)
        self._lock = threading.Lock()
        self._clients: dict[str, _Client] = {}
        # run_id -> its connected clients. A batch waits for runs, not clients: a runner
        # stepping its environments in groups connects one client per group under one
        # run_id, and while one group steps only the other can be waiting.
        self._runs: dict[str, int] = {}
        self._free = np.ones(n, bool)  # Slots no client holds (`_take_slots`).
        self._needs_reset = np.zeros(n, bool)
        self._batcher = DynamicBatcher(
            self._process,
            max_batch_size=config.max_batch_size,
            max_wait_s=config.max_wait_ms / 1000.0,
            expected_requests=lambda: len(self._runs),
            name="inference-batcher",
            active_window_s=config.active_window_ms / 1000.0,
        )

    # -- client lifecycle --------------------------------------------------------------

    def connect(self, client_id: str, num_envs: int, run_id: str | None = None) -> np.ndarray:
        """Registers `num_envs` environments of a client and returns their slot ids.

        A client that connects again under the same `client_id` with a new `run_id` (a
        restarted process) gets fresh slots: its old environments' state and partial
        unrolls are dropped, never written. Without `run_id` the server makes one; an
        empty one is refused (a `disconnect` naming it could never match). Clients that
        share a `run_id` are one runner's groups of environments (`EnvRunner`'s `groups`):
        a batch waits for every run to have a request in, not for every client.
        """
        if num_envs < 1:
            raise ValueError(f"num_envs must be >= 1, got {num_envs}.")
        if run_id == "":
            raise ValueError("run_id must not be empty (None: the server makes one).")
        run_id = run_id or uuid.uuid4().hex
        with self._lock:
            if client_id in self._clients:
                self._release_locked(client_id)
            slots = self._take_slots(num_envs)
            self._needs_reset[slots] = True
            self._clients[client_id] = _Client(client_id, slots, run_id)
            self._runs[run_id] = self._runs.get(run_id, 0) + 1
        return slots

    def disconnect(self, client_id: str, run_id: str | None = None) -> None:
        """Forgets a client; its environments' partial unrolls are discarded.

        With `run_id`, only that run of the client is forgotten: a transport cleaning up
        after a dead stream must not disconnect the restarted process that replaced it.
        """
        with self._lock:
            client = self._clients.get(client_id)
            if client is not None and (run_id is None or client.run_id == run_id):
                self._release_locked(client_id)

    def _take_slots(self, n: int) -> np.ndarray:
        """The lowest run of `n` consecutive free slots, or else the lowest `n` free ones,
        ascending; marked taken (the lock held).

        A client's slots are one contiguous ascending run whenever one is free, also after
        other clients came and went (a runner restarted in a long run): its frame stacks
        then shift in place (`FrameStacks.push`) instead of being gathered and scattered.
        """
        free = np.flatnonzero(self._free)
        if n > len(free):
            raise ValueError(f"Cannot connect {n} environments: {len(free)} of "
                             f"max_envs={self._config.max_envs} slots are free.")
        # free[i:i + n] is consecutive exactly when its last minus its first is n - 1.
        runs = np.flatnonzero(free[n - 1:] - free[:len(free) - n + 1] == n - 1)
        start = int(runs[0]) if runs.size else 0
        slots = free[start:start + n].astype(np.int64)
        self._free[slots] = False
        return slots

    def _release_locked(self, client_id: str) -> None:
        client = self._clients.pop(client_id)
        self._free[client.slots] = True
        left = self._runs.pop(client.run_id) - 1
        if left:
            self._runs[client.run_id] = left

    @property
    def num_clients(self) -> int:
        return len(self._clients)

    @property
    def client_observation_shape(self) -> tuple[int, ...]:
        """The observation shape a client sends per environment: the spec's, or one
        frame of it when the server stacks frames (`InferenceConfig.frame_stack`)."""
        return self._obs_shape

    @property
    def max_envs(self) -> int:
        """Environment slots in all (`InferenceConfig.max_envs`)."""
        return self._config.max_envs

    # -- stepping ----------------------------------------------------------------------

    def step(self, client_id: str, batch: StepBatch) -> np.ndarray:
        """Returns one action per environment of `client_id` for its step results.

        Raises ValueError (before anything reaches the batch) when the batch does not match
        the environment spec or the client's number of environments.
        """
        client = self._checked_client(client_id, batch)
        return self._batcher.submit((client, batch), size=len(client.slots), caller=client.run_id)

    def channel(self, client_id: str) -> ServerChannel:
        """An `InferenceChannel` for a connected client (a runner's group in this process):
        `send` queues its batch without blocking, `receive` waits for the actions."""
        return ServerChannel(self, client_id)

    def submit(self, client_id: str, batch: StepBatch, callback: Callback,
               validated: bool = False) -> None:
        """`step` without blocking: `callback(actions, error)` runs on the batcher thread
        (see `DynamicBatcher.submit_nowait`). Raises as `step` does before queueing;
        `validated` skips the checks of `batch` against the spec that the caller already
        made (the wire decoder makes them all)."""
        client = self._checked_client(client_id, batch, validated)
        self._batcher.submit_nowait((client, batch), len(client.slots), callback,
                                   client.run_id)

    def _checked_client(self, client_id: str, batch: StepBatch,
                        validated: bool = False) -> _Client:
        client = self._clients.get(client_id)
        if client is None:
            raise ValueError(f"Unknown client {client_id!r}: connect first.")
        if not validated:
            self._validate(batch, len(client.slots))
        elif len(batch.step_type) != len(client.slots):
            raise ValueError(f"batch has {len(batch.step_type)} environments, client "
                             f"{client_id!r} has {len(client.slots)}.")
        return client

    def _validate(self, batch: StepBatch, num_envs: int) -> None:
        obs = batch.observation
        if obs.dtype != self._obs_dtype or obs.shape != (num_envs, *self._obs_shape):
            raise ValueError(
                f"observation must be {self._obs_dtype}{[num_envs, *self._obs_shape]}, "
                f"got {obs.dtype}{list(obs.shape)}."
            )
        for name, expected in (("reward", np.float32), ("discount", np.float32),
                               ("step_type", np.uint8)):
            value = getattr(batch, name)
            if value.dtype != expected or value.shape != (num_envs,):
                raise ValueError(
                    f"{name} must be {np.dtype(expected)}[{num_envs}], "
                    f"got {value.dtype}{list(value.shape)}."
                )
        if batch.step_type.max(initial=0) > LAST:
            raise ValueError(f"step_type values must be 0, 1 or 2, got {batch.step_type}.")

    def _process(self, requests: Sequence[tuple[_Client, StepBatch]]) -> list[np.ndarray]:
        if not requests:
            return []
        stale = [self._clients.get(c.client_id) is not c for c, _ in requests]
        if any(stale):
            # Requests of clients that disconnected meanwhile: answered, never recorded.
            live = iter(self._process([r for r, x in zip(requests, stale, strict=True) if not x]))
            return [
                np.zeros((len(c.slots), *self._prev_action.shape[1:]), self._prev_action.dtype)
                if x else next(live)
                for (c, _), x in zip(requests, stale, strict=True)
            ]
        if len(requests) == 1:
            client, batch = requests[0]
            slots = client.slots
            obs, reward = batch.observation, batch.reward
            discount, step_type = batch.discount, batch.step_type
        else:
            slots = np.concatenate([r[0].slots for r in requests])
            # Stacked frames are concatenated after the push (`_stack_frames`).
            obs = (None if self._frames is not None
                   else np.concatenate([r[1].observation for r in requests]))
            reward = np.concatenate([r[1].reward for r in requests])
            discount = np.concatenate([r[1].discount for r in requests])
            step_type = np.concatenate([r[1].step_type for r in requests])

        self._reset_new_slots(slots)
        first = step_type == FIRST
        if self._frames is not None:
            obs = self._stack_frames(requests, first)
        state_in = tree.map_structure(lambda s: s[slots], self._state)
        prev_action = self._prev_action[slots]
        if first.any():
            prev_action[first] = 0
            for s, init in zip(tree.flatten(state_in), tree.flatten(self._initial_state),
                               strict=True):
                s[first] = init[0]
        if self._counts_unseen:
            self._counts_unseen = False
            self._observe_counts(self._counter.get_counts())
        action, extras, state_out = self._policy.step(obs, prev_action, state_in, slots)
        action = np.asarray(action, self._prev_action.dtype)
        for s, new in zip(tree.flatten(self._state), tree.flatten(state_out), strict=True):
            s[slots] = new
        self._prev_action[slots] = action

        evaluation = slots < self._num_eval if self._num_eval else None
        if self._adder is not None:
            rows = {
                unrolls.OBSERVATION: obs,
                unrolls.PREV_ACTION: prev_action,
                unrolls.REWARD: reward,
                unrolls.DISCOUNT: discount,
                unrolls.STEP_TYPE: step_type,
                unrolls.ACTION: action,
                unrolls.EXTRAS: extras,
            }
            if evaluation is not None and evaluation.any():
                # Evaluation environments act greedily: their experience is not training data.
                train = ~evaluation
                slots_in, rows, state_in = (
                    slots[train], tree.map_structure(lambda x: x[train], rows),
                    tree.map_structure(lambda x: x[train], state_in))
                if slots_in.size:
                    self._adder.add(slots_in, rows, state_in)
            else:
                self._adder.add(slots, rows, state_in)
        self._track_episodes(slots, reward, first, step_type == LAST, evaluation)

        if len(requests) == 1:
            return [action]
        bounds = np.cumsum([len(r[0].slots) for r in requests])[:-1]
        return np.split(action, bounds)

    def _stack_frames(self, requests: Sequence[tuple[_Client, StepBatch]],
                      first: np.ndarray) -> np.ndarray:
        """Pushes each request's frames into its slots' stacks: the batch's observations."""
        push = self._frames.push
        if len(requests) == 1:
            client, batch = requests[0]
            return push(client.slots, batch.observation, first)
        stacks, at = [], 0
        for client, batch in requests:
            n = len(client.slots)
            stacks.append(push(client.slots, batch.observation, first[at:at + n]))
            at += n
        return np.concatenate(stacks)

    def _track_episodes(
        self, slots: np.ndarray, reward: np.ndarray, first: np.ndarray, last: np.ndarray,
        evaluation: np.ndarray | None,
    ) -> None:
        stepped = ~first
        returns = np.where(first, 0.0, self._episode_return[slots] + reward)
        lengths = np.where(first, 0, self._episode_length[slots] + 1)
        self._episode_return[slots] = returns
        self._episode_length[slots] = lengths
        if last.any():
            if evaluation is None:
                self.stats.record(returns[last], lengths[last])
            else:
                train_last, eval_last = last & ~evaluation, last & evaluation
                self.stats.record(returns[train_last], lengths[train_last])
                self.eval_stats.record(returns[eval_last], lengths[eval_last])
        if evaluation is None:
            counts = self._counter.increment(env_steps=int(stepped.sum()), inference_batches=1)
        else:
            # Evaluation steps are not experience: they count apart, as an evaluator's do.
            evaluated = int((stepped & evaluation).sum())
            counts = self._counter.increment(env_steps=int(stepped.sum()) - evaluated,
                                             eval_env_steps=evaluated, inference_batches=1)
        if self._observe_counts is not None:
            self._observe_counts(counts)

    def _reset_new_slots(self, slots: np.ndarray) -> None:
        needs_reset = self._needs_reset[slots]
        if not needs_reset.any():
            return
        fresh = slots[needs_reset]
        self._needs_reset[fresh] = False
        if self._frames is not None:
            self._frames.clear(fresh)  # No frame of a previous owner's environment.
        if self._adder is not None:
            self._adder.reset(fresh)
        self._episode_return[fresh] = 0.0
        self._episode_length[fresh] = 0

    def status(self) -> dict[str, float]:
        """Training episode statistics, plus "eval_"-prefixed ones of the evaluation
        environments when the policy has any."""
        status = self.stats.summary()
        if self._num_eval:
            status.update(self.eval_stats.summary("eval_"))
        return status

    def inference_stats(self) -> dict[str, Any]:
        """The batcher's cumulative counts (see `DynamicBatcher.stats`), keys prefixed
        "inference_": what `launch.limiter.program_rates` turns into rates."""
        return {f"inference_{k}": v for k, v in self._batcher.stats().items()}

    def close(self) -> None:
        """Stops batching; callers still waiting get `BatcherClosedError`."""
        self._batcher.close()

    @property
    def batcher(self) -> DynamicBatcher:
        return self._batcher


class ServerChannel:
    """One client's `InferenceChannel` to an `InferenceServer` in the same process.

    `send` hands the batch to the batcher by reference (`submit`: the runner leaves it
    untouched until `receive` returns); the batcher's callback wakes `receive`.
    """

    def __init__(self, server: InferenceServer, client_id: str):
        self._server = server
        self._client_id = client_id
        self._answered = threading.Event()
        self._actions: np.ndarray | None = None
        self._error: BaseException | None = None

    def _callback(self, actions: Any, error: BaseException | None) -> None:
        self._actions, self._error = actions, error
        self._answered.set()

    def send(self, batch: StepBatch) -> None:
        self._answered.clear()
        self._server.submit(self._client_id, batch, self._callback)

    def receive(self) -> np.ndarray:
        self._answered.wait()
        actions, error = self._actions, self._error
        self._actions = self._error = None
        if error is not None:
            raise error
        return actions
