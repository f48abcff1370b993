"""`seed-agents export`: a trained agent's acting policy as a TensorFlow SavedModel.

The SavedModel needs TensorFlow only (not seed-agents) to load and run:

    policy = tf.saved_model.load("exported")
    state = policy.initial_state(batch_size)                  # () without memory
    action, extras, state = policy.greedy_step(observation, prev_action, state)
    action, extras, state = policy.sample_step(observation, prev_action, state)

`greedy_step` is the agent's evaluation behaviour (`make_policy(evaluation=True)`),
`sample_step` its behaviour in training (`make_policy(evaluation=False)`, for its first
training environment: V-trace samples its softmax, R2D2 acts epsilon-greedily); the
sampling generator starts from `seed` and advances with every call. Inputs carry a batch
axis: observation [B, *obs], previous action [B, *action] (0 at an episode's first
step, like the state's initial value), recurrent state a tuple of [B, ...] arrays.
Shapes and dtypes follow the environment's spec (discrete actions int32 [B]; a
continuous agent's float32 [B, d]).

A continuous agent acts in [-1, 1]^d whatever the task (`CanonicalActions`); where the
environment's own bounds differ, `to_environment_action(action)` maps an action to them
(the signatures return it too, as `environment_action`) and the metadata names both
ranges. Only what acting reads is saved (`ContinuousPolicy.acting_objects`: the actor,
not the critics and target networks).

The same functions are serving signatures with flat named tensors, for TF Serving and
other tools: "greedy" and "sample" take observation, prev_action, state_0..state_{k-1}
and return action, extras_<name>... and next_state_0..next_state_{k-1}; "initial_state"
(recurrent agents only) takes batch_size and returns state_0...
`seed_agents_export.json` beside saved_model.pb describes the inputs and outputs and
what was exported. With `onnx=True` the greedy signature is also
converted to `policy_greedy.onnx` (tf2onnx; the `onnx` extra): the sampling one draws
from a TensorFlow random generator, which ONNX has no counterpart for.
"""

from __future__ import annotations

import argparse
import dataclasses
import datetime
import os
from typing import Any

from launch.commands import Agents, failing, quiet_tensorflow
from launch.restore import RestoredRun, load_run
from seed_agents.utils.checkpointing import write_json_atomically

EXPORT_FORMAT = 1
METADATA_FILE = "seed_agents_export.json"
ONNX_FILE = "policy_greedy.onnx"
_ONNX_OPSET = 17


@dataclasses.dataclass(frozen=True)
class ExportResult:
    directory: str
    metadata: dict[str, Any]
    onnx: str | None = None

    def summary(self) -> str:
        meta = self.metadata
        lines = [
            f"exported {meta['checkpoint']} (learner step {meta['learner_step']}) to "
            f"{self.directory}",
            f"functions: greedy_step, sample_step, initial_state; signatures: "
            f"{', '.join(meta['signatures'])}",
            f"inputs: observation {meta['observation']['shape']} "
            f"{meta['observation']['dtype']}, prev_action {meta['action']['shape']} "
            f"{meta['action']['dtype']}, state {[s['shape'] for s in meta['state']]}",
            "load: policy = tf.saved_model.load(...); "
            "action, extras, state = policy.greedy_step(observation, prev_action, state)",
        ]
        if meta.get("environment_action"):
            bounds = meta["environment_action"]
            lines.append(f"actions in [-1, 1]; to_environment_action(action) gives the "
                         f"environment's, in [{bounds['minimum']}, {bounds['maximum']}]")
        if self.onnx:
            lines.append(f"onnx (greedy): {self.onnx}")
        return "\n".join(lines)


def _check_out(out: str) -> None:
    if os.path.exists(out) and (not os.path.isdir(out) or os.listdir(out)):
        raise ValueError(f"{out} exists and is not an empty directory: export writes a new "
                         "one (nothing was overwritten).")


def export_policy(run: RestoredRun, out: str | os.PathLike[str], seed: int = 0,
                  onnx: bool = False) -> ExportResult:
    """Writes `run`'s acting policy as a SavedModel in the new directory `out`.

    Raises:
      ValueError: when `out` exists and is not empty (nothing is written), when the
        agent's policy cannot be exported, or, with `onnx`, when tf2onnx is missing
        (before anything is written) or fails.
    """
    import tensorflow as tf
    import tree

    from seed_agents.policies.inputs import step_signature
    from seed_agents.utils.graph_functions import graph_function

    out = os.fspath(out)
    _check_out(out)
    if onnx:
        _require_tf2onnx()
    greedy = run.make_policy(evaluation=True, seed=seed)
    sampling = run.make_policy(evaluation=False, seed=seed)
    try:
        greedy_step, greedy_objects = greedy.export_step()
        sample_step, sample_objects = sampling.export_step()
    except NotImplementedError as error:
        raise ValueError(f"{run.record.builder}'s policy cannot be exported: {error}") \
            from error
    observation, prev_action, state = step_signature(run.spec, greedy.state_spec)
    flat_state = tree.flatten(state)
    rescaled = None if run.spec.discrete_actions else environment_actions(run.environment)

    module = tf.Module()
    module.carried = [*greedy_objects, *sample_objects]  # tracked: saved with the model
    signature = [observation, prev_action, state]
    module.greedy_step = graph_function(greedy_step, input_signature=signature)
    module.sample_step = graph_function(sample_step, input_signature=signature)
    to_environment = None
    if rescaled is not None:
        to_environment = _rescaling(rescaled)
        module.to_environment_action = graph_function(
            to_environment, input_signature=[tf.TensorSpec(prev_action.shape, tf.float32)])

    @graph_function(input_signature=[tf.TensorSpec([], tf.int32, name="batch_size")])
    def initial_state(batch_size):
        return tree.map_structure(
            lambda s: tf.zeros(tf.concat([[batch_size], s.shape[1:]], 0), s.dtype), state)

    module.initial_state = initial_state
    named = [tf.TensorSpec(observation.shape, observation.dtype, name="observation"),
             tf.TensorSpec(prev_action.shape, prev_action.dtype, name="prev_action"),
             *[tf.TensorSpec(s.shape, s.dtype, name=f"state_{i}")
               for i, s in enumerate(flat_state)]]
    signatures = {"greedy": _serving(greedy_step, state, named, to_environment),
                  "sample": _serving(sample_step, state, named, to_environment)}
    if flat_state:
        signatures["initial_state"] = graph_function(
            lambda batch_size: {f"state_{i}": t for i, t in
                                enumerate(tree.flatten(initial_state(batch_size)))},
            input_signature=[tf.TensorSpec([], tf.int32, name="batch_size")])
    os.makedirs(out, exist_ok=True)
    tf.saved_model.save(module, out, signatures=signatures)
    onnx_path = None
    if onnx:
        onnx_path = os.path.join(out, ONNX_FILE)
        _convert_to_onnx(signatures["greedy"], named, onnx_path)
    metadata = _metadata(run, greedy, signatures, seed, onnx_path, rescaled)
    write_json_atomically(os.path.join(out, METADATA_FILE), metadata)
    return ExportResult(out, metadata, onnx_path)


def environment_actions(environment: str) -> Any:
    """The action spec a continuous agent's [-1, 1] actions are rescaled to in
    `environment` (its own bounds), or None where actions are not rescaled."""
    from seed_agents.envs import environment_factory
    from seed_agents.envs.action_scaling import environment_action_spec

    env = environment_factory(environment)(0)
    try:
        return environment_action_spec(env)
    finally:
        env.close()


def _rescaling(spec: Any) -> Any:
    """a -> minimum + (a + 1) / 2 (maximum - minimum): `CanonicalActions`' map, in
    TensorFlow (float32; the environment's dtype is named in the metadata)."""
    import numpy as np
    import tensorflow as tf

    low = np.broadcast_to(np.asarray(spec.minimum, np.float64), spec.shape)
    high = np.broadcast_to(np.asarray(spec.maximum, np.float64), spec.shape)
    offset = tf.constant((high + low) / 2.0, tf.float32)
    scale = tf.constant((high - low) / 2.0, tf.float32)

    def to_environment(action):
        return offset + scale * tf.clip_by_value(action, -1.0, 1.0)

    return to_environment


def _serving(step: Any, state: Any, named: list[Any], to_environment: Any = None) -> Any:
    """`step` as a signature function of flat named tensors, returning a flat dict (with
    `environment_action` beside `action` where the environment's bounds differ)."""
    import tree

    from seed_agents.utils.graph_functions import graph_function

    @graph_function(input_signature=named)
    def serve(observation, prev_action, *flat_state):
        action, extras, next_state = step(observation, prev_action,
                                          tree.unflatten_as(state, list(flat_state)))
        outputs = {"action": action}
        if to_environment is not None:
            outputs["environment_action"] = to_environment(action)
        outputs.update({f"extras_{key}": value for key, value in extras.items()})
        outputs.update({f"next_state_{i}": t for i, t in enumerate(tree.flatten(next_state))})
        return outputs

    return serve


def _require_tf2onnx() -> None:
    try:
        import tf2onnx  # noqa: F401
    except ImportError as error:
        raise ValueError("--onnx needs tf2onnx: pip install 'seed-agents[onnx]' "
                         f"({error}).") from error


def _convert_to_onnx(function: Any, named: list[Any], path: str) -> None:
    import tf2onnx

    try:
        tf2onnx.convert.from_function(function, input_signature=named, opset=_ONNX_OPSET,
                                      output_path=path)
    except Exception as error:  # noqa: BLE001 - tf2onnx raises many kinds; say which
        raise ValueError(f"tf2onnx could not convert the greedy policy: {error!r}") from error


def _array(spec: Any) -> dict[str, Any]:
    import numpy as np

    described: dict[str, Any] = {"shape": ["B", *spec.shape], "dtype": np.dtype(spec.dtype).name}
    if hasattr(spec, "num_values"):
        described["num_values"] = int(spec.num_values)
    elif hasattr(spec, "minimum"):
        described["minimum"] = np.asarray(spec.minimum).tolist()
        described["maximum"] = np.asarray(spec.maximum).tolist()
    return described


def _metadata(run: RestoredRun, policy: Any, signatures: dict[str, Any], seed: int,
              onnx_path: str | None, rescaled: Any = None) -> dict[str, Any]:
    import tree

    environment_action = None
    if rescaled is not None:
        environment_action = {
            **_array(rescaled),
            "from_action": "minimum + (action + 1) / 2 * (maximum - minimum), action "
                           "clipped to [-1, 1]: to_environment_action(action), and the "
                           "signatures' environment_action output",
        }
    return {
        "format": EXPORT_FORMAT,
        "exported_at": datetime.datetime.now().isoformat(timespec="seconds"),
        "logdir": run.logdir,
        "builder": run.record.builder,
        "config": run.record.config,
        "environment": run.environment,
        "checkpoint": run.checkpoint.path,
        "learner_step": run.checkpoint.step,
        "env_steps": run.checkpoint.counts.get("env_steps"),
        "observation": _array(run.spec.observations),
        "action": _array(run.spec.actions),
        "environment_action": environment_action,
        "state": [_array(s) for s in tree.flatten(policy.state_spec)],
        "extras": {k: _array(s) for k, s in policy.extras_spec.items()},
        "functions": {
            "greedy_step": "(observation, prev_action, state) -> (action, extras, state)",
            "sample_step": "(observation, prev_action, state) -> (action, extras, state)",
            "initial_state": "(batch_size) -> state",
            **({"to_environment_action": "(action) -> the environment's action"}
               if rescaled is not None else {}),
        },
        "signatures": sorted(signatures),
        "sample_seed": seed,
        "onnx": os.path.basename(onnx_path) if onnx_path else None,
    }


@failing
def run_export(args: argparse.Namespace, agents: Agents) -> int:
    quiet_tensorflow()
    run = load_run(args.logdir, agents, checkpoint=args.checkpoint)
    print(export_policy(run, args.out, seed=args.seed, onnx=args.onnx).summary(), flush=True)
    return 0
