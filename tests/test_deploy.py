"""The deployment examples in examples/deploy: they parse, carry the keys Ray's cluster launcher and
KubeRay need, pin one Ray version, and run a training command that the real command line accepts."""

from __future__ import annotations

import configparser
import importlib
import re
import shlex
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
DEPLOY = ROOT / "examples" / "deploy"
CLUSTER_YAML = DEPLOY / "ray-cluster.yaml"
RAYJOB_YAML = DEPLOY / "rayjob.yaml"
NETWORK_POLICY_YAML = DEPLOY / "networkpolicy.yaml"
README = DEPLOY / "README.md"

# `ray exec <this file> "seed-agents ..."`, in the comments of ray-cluster.yaml.
_EXEC_COMMENT = re.compile(r'^#\s*ray exec (\S+) "(seed-agents [^"]+)"\s*$', re.MULTILINE)
_RAY_PIN = re.compile(r"\bray(?:\[default\])?==(\d+\.\d+\.\d+)")


def _load(path: Path) -> dict:
    with path.open() as f:
        data = yaml.safe_load(f)
    assert isinstance(data, dict), f"{path.name} is not a YAML mapping"
    return data


def _cluster_command() -> str:
    matches = _EXEC_COMMENT.findall(CLUSTER_YAML.read_text())
    assert matches, "ray-cluster.yaml has no `ray exec <config> \"seed-agents ...\"` comment"
    for config_path, _ in matches:
        assert config_path == str(CLUSTER_YAML.relative_to(ROOT)), config_path
    return matches[0][1]


def _rayjob_command() -> str:
    return _load(RAYJOB_YAML)["spec"]["entrypoint"].strip()


def _containers(pod_template: dict) -> list[dict]:
    containers = pod_template["template"]["spec"]["containers"]
    assert containers, "a pod template without containers"
    return containers


def _assert_resources(container: dict) -> None:
    resources = container.get("resources") or {}
    for kind in ("requests", "limits"):
        assert resources.get(kind, {}).get("cpu"), f"{container['name']}: no cpu {kind}"
        assert resources.get(kind, {}).get("memory"), f"{container['name']}: no memory {kind}"


# --- ray-cluster.yaml (Ray cluster launcher) ---------------------------------------------------


def test_cluster_yaml_has_what_the_cluster_launcher_needs():
    config = _load(CLUSTER_YAML)
    assert isinstance(config["cluster_name"], str) and config["cluster_name"]
    assert config["max_workers"] >= 1
    assert config["provider"]["type"] == "aws"
    assert config["provider"]["region"]

    node_types = config["available_node_types"]
    head = config["head_node_type"]
    assert head in node_types
    workers = {name: spec for name, spec in node_types.items() if name != head}
    assert workers, "no worker node type"
    for name, spec in {head: node_types[head], **workers}.items():
        assert spec["node_config"]["InstanceType"], name
        assert "resources" in spec, name
    assert any(spec.get("max_workers", 0) >= 1 for spec in workers.values())

    setup = " ; ".join(config["setup_commands"])
    assert "python3.11" in setup
    assert "pip install" in setup and "seed-agents" in setup

    head_start = " ; ".join(config["head_start_ray_commands"])
    worker_start = " ; ".join(config["worker_start_ray_commands"])
    assert "ray start --head" in head_start and "--port=6379" in head_start
    assert "--include-dashboard=false" in head_start
    assert "ray start --address=$RAY_HEAD_IP:6379" in worker_start
    for flag in ("--node-manager-port=", "--object-manager-port=", "--min-worker-port=",
                 "--max-worker-port="):
        assert flag in head_start and flag in worker_start, flag

    # Ray token authentication on every node: the token file travels, the mode is set.
    assert "~/.ray/auth_token" in config["file_mounts"]
    assert "RAY_AUTH_MODE=token" in head_start and "RAY_AUTH_MODE=token" in worker_start


def test_cluster_yaml_passes_ray_schema_validation():
    util = pytest.importorskip("ray.autoscaler._private.util")
    config = util.prepare_config(_load(CLUSTER_YAML))  # fills in the provider's defaults
    util.validate_config(config)  # Ray's ray-schema.json; raises on a malformed config


def test_cluster_yaml_pins_core_ray_once():
    text = "\n".join(_load(CLUSTER_YAML)["setup_commands"])
    pins = set(_RAY_PIN.findall(text))
    assert len(pins) == 1, f"setup_commands should pin ray exactly once, found {pins}"
    assert "ray[default]" not in text, "core ray: ray[default]'s dashboard is not started here"


# --- rayjob.yaml (KubeRay) ----------------------------------------------------------------------


def test_rayjob_has_what_kuberay_needs():
    job = _load(RAYJOB_YAML)
    assert job["apiVersion"] == "ray.io/v1"
    assert job["kind"] == "RayJob"
    assert job["metadata"]["name"]
    spec = job["spec"]
    assert spec["entrypoint"].strip().startswith("seed-agents ")
    assert spec["shutdownAfterJobFinishes"] is True
    assert spec.get("submissionMode", "K8sJobMode") in {"K8sJobMode", "HTTPMode"}
    if "runtimeEnvYAML" in spec:
        assert isinstance(yaml.safe_load(spec["runtimeEnvYAML"]), dict)

    cluster = spec["rayClusterSpec"]
    head = cluster["headGroupSpec"]
    assert "rayStartParams" in head
    for container in _containers(head):
        _assert_resources(container)
    groups = cluster["workerGroupSpecs"]
    assert len(groups) >= 1
    for group in groups:
        assert group["groupName"] and group["replicas"] >= 1
        assert group["minReplicas"] <= group["replicas"] <= group["maxReplicas"]
        for container in _containers(group):
            _assert_resources(container)
    assert cluster.get("authOptions", {}).get("mode") == "token"


def test_rayjob_pins_one_ray_version_everywhere():
    cluster = _load(RAYJOB_YAML)["spec"]["rayClusterSpec"]
    version = str(cluster["rayVersion"])
    pods = [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]
    for pod in pods:
        for container in _containers(pod):
            assert f":{version}-" in container["image"], (container["image"], version)
            install = " ".join(container["command"])
            assert "pip install" in install and "seed-agents" in install
            # ray[default]: RayJob submits through the dashboard's Jobs API.
            assert f'"ray[default]=={version}"' in install, install


# --- the training command --------------------------------------------------------------------


@pytest.fixture(scope="module")
def cli():
    return importlib.import_module("launch.commands.cli")  # must import: it is the entry point


def test_seed_agents_is_the_cli_entry_point(cli):
    setup = configparser.ConfigParser()
    setup.read(ROOT / "setup.cfg")
    scripts = {}
    for line in setup["options.entry_points"]["console_scripts"].strip().splitlines():
        name, _, target = line.partition("=")
        scripts[name.strip()] = target.strip()
    assert scripts.get("seed-agents") == "launch.commands.cli:main"
    assert callable(cli.main) and callable(cli.build_parser)


def test_both_deployments_run_the_same_command():
    # But for where the run lives and how a new cluster takes it up: the RayJob's volume
    # outlives its pods, and a retried job resumes from it.
    rayjob = _rayjob_command().replace("/runs/cartpole", "/tmp/runs/cartpole")
    assert _cluster_command() == rayjob.replace(" --resume-if-checkpointed", "")


@pytest.mark.parametrize("source", ["ray-cluster.yaml", "rayjob.yaml"])
def test_deploy_command_parses_with_the_real_parser(cli, source):
    command = _cluster_command() if source == "ray-cluster.yaml" else _rayjob_command()
    argv = shlex.split(command)
    assert argv[0] == "seed-agents"
    try:
        args = cli.build_parser().parse_args(argv[1:])
    except SystemExit as exit_:
        pytest.fail(f"`seed-agents` rejects the command in {source} (exit {exit_.code}): "
                    f"{command}; argparse's message is on stderr above")
    assert args.command == "train"
    assert args.backend == "ray"
    assert args.ray_address == "auto"
    assert args.runners == 8 and args.envs_per_runner == 16
    assert args.max_node_restarts > 0 and args.checkpoint_every_s
    assert args.resume_if_checkpointed == (source == "rayjob.yaml")


# --- README ------------------------------------------------------------------------------------


def test_readme_warns_about_authentication_and_ports():
    text = README.read_text()
    flat = " ".join(text.split())  # ignore line breaks
    assert "The inference service (learner node) refuses runners without the run's token" in flat
    assert "Reverb (replay node) has no authentication" in flat
    assert "private network" in flat
    for flag in ("--inference-token-file", "--tls-cert", "--tls-key", "--tls-ca"):
        assert flag in text, flag
    assert "networkpolicy.yaml" in text
    assert "ray get-auth-token" in text and "RAY_AUTH_MODE=token" in text
    for needle in ("6379", "10001", "--node-manager-port", "--object-manager-port",
                   "--min-worker-port", "--max-worker-port"):
        assert needle in text, needle
    assert _cluster_command() in text


# --- networkpolicy.yaml: only the learner's pod reaches Reverb -------------------------------


def _option(argv: list[str], flag: str) -> str:
    return argv[argv.index(flag) + 1]


def test_network_policy_keeps_reverb_to_the_learner_pod(cli):
    policy = _load(NETWORK_POLICY_YAML)
    assert policy["apiVersion"] == "networking.k8s.io/v1" and policy["kind"] == "NetworkPolicy"
    spec = policy["spec"]
    assert spec["policyTypes"] == ["Ingress"]
    argv = shlex.split(_rayjob_command())
    replay_port = int(_option(argv, "--replay-port"))
    resource = _option(argv, "--learner-resource")
    # The pods the policy protects: the rayjob's `learner` group, the only one offering the
    # resource that pins the replay and learner nodes.
    cluster = _load(RAYJOB_YAML)["spec"]["rayClusterSpec"]
    groups = {g["groupName"]: g for g in cluster["workerGroupSpecs"]}
    learner = groups["learner"]
    assert learner["replicas"] == learner["maxReplicas"] == 1
    assert resource in learner["rayStartParams"]["resources"]
    offering = [name for name, g in groups.items()
                if resource in str(g.get("rayStartParams", {}).get("resources", ""))]
    assert offering == ["learner"]
    assert resource not in str(cluster["headGroupSpec"]["rayStartParams"])
    learner_labels = learner["template"]["metadata"]["labels"]
    selected = spec["podSelector"]["matchLabels"]
    assert selected.items() <= learner_labels.items()
    # The replay port is open to the learner pod only; every other port to the run's pods.
    rules = spec["ingress"]
    reverb = [r for r in rules if any(p.get("port") == replay_port and "endPort" not in p
                                      for p in r["ports"])]
    assert len(reverb) == 1
    (source,) = reverb[0]["from"]
    assert source["podSelector"]["matchLabels"].items() <= learner_labels.items()
    others = [r for r in rules if r is not reverb[0]]
    for rule in others:
        for port in rule["ports"]:
            low, high = port["port"], port.get("endPort", port["port"])
            assert not low <= replay_port <= high, port
    open_ports = {p for r in others for port in r["ports"]
                  for p in range(port["port"], port.get("endPort", port["port"]) + 1)}
    assert open_ports == set(range(1, 65536)) - {replay_port}
    # Every pod of the run carries the label the "others" rule admits.
    run_label = others[0]["from"][0]["podSelector"]["matchLabels"]
    for pod in [cluster["headGroupSpec"], *cluster["workerGroupSpecs"]]:
        assert run_label.items() <= pod["template"]["metadata"]["labels"].items()
