"""Naming agents the toolkit does not ship: import paths, plug-ins, and a script's builder."""

from __future__ import annotations

import dataclasses
import subprocess
import sys
import textwrap
from pathlib import Path

import pytest

from builders.vtrace import VTraceBuilder
from launch.commands.agents import ENTRY_POINT_GROUP, agent_table, config_type_of, resolve_agent
from seed_agents.agents.vtrace.config import VTraceConfig
from seed_agents.utils.class_paths import class_path, same_class_path

ROOT = Path(__file__).resolve().parents[1]

PLUGIN = '''
import dataclasses

from builders.vtrace import VTraceBuilder
from seed_agents.agents.vtrace.config import VTraceConfig


@dataclasses.dataclass
class TinyConfig:
    hidden: int = 8


class AnnotatedBuilder(VTraceBuilder):
    def __init__(self, config: TinyConfig):
        super().__init__(VTraceConfig(hidden_sizes=(config.hidden,)))


class DeclaredBuilder(VTraceBuilder):
    config_type = VTraceConfig


class NoConfigBuilder:
    def __init__(self, size: int):
        self.size = size

    def make_networks(self, spec):
        pass

    def make_learner(self, networks, replay_address):
        pass

    def make_policy(self, networks, spec):
        pass


class NotABuilder:
    pass
'''


@pytest.fixture
def plugin(tmp_path, monkeypatch):
    """A module `tiny_plugin` on the path, and an installed distribution that registers
    its builder under the entry-point group (a real dist-info, found by importlib)."""
    (tmp_path / "tiny_plugin.py").write_text(PLUGIN)
    info = tmp_path / "tiny_plugin-1.0.dist-info"
    info.mkdir()
    (info / "METADATA").write_text("Metadata-Version: 2.1\nName: tiny-plugin\nVersion: 1.0\n")
    (info / "entry_points.txt").write_text(
        f"[{ENTRY_POINT_GROUP}]\ntiny = tiny_plugin:DeclaredBuilder\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    yield "tiny_plugin"
    sys.modules.pop("tiny_plugin", None)


def test_shipped_names_plugins_and_import_paths_resolve(plugin):
    assert resolve_agent("vtrace") == (VTraceBuilder, VTraceConfig)
    assert config_type_of(VTraceBuilder) is VTraceConfig  # its dataclass field
    builder, config = resolve_agent("tiny")  # the entry point
    assert (builder.__name__, config) == ("DeclaredBuilder", VTraceConfig)
    builder, config = resolve_agent(f"{plugin}:AnnotatedBuilder")
    assert builder.__name__ == "AnnotatedBuilder" and config.__name__ == "TinyConfig"
    assert set(agent_table(f"{plugin}:AnnotatedBuilder")) == {
        "vtrace", "r2d2", "sac", "d4pg", "td3", "mpo", "bc", "cql", "iql",
        f"{plugin}:AnnotatedBuilder"}


@pytest.mark.parametrize("name, message", [
    ("dqn", "Unknown agent 'dqn'.*package.module:Builder"),
    ("no_such_module:Builder", "module 'no_such_module' does not import"),
    ("tiny_plugin:Missing", "has no 'Missing'"),
    ("tiny_plugin:NotABuilder", "is not an agent builder class"),
    ("tiny_plugin:NoConfigBuilder", "names no config dataclass"),
    (":Builder", "expected package.module:Builder"),
])
def test_a_name_that_is_not_a_builder_is_refused_clearly(plugin, name, message):
    with pytest.raises(ValueError, match=message):
        resolve_agent(name)


def test_a_builder_that_is_a_dataclass_of_its_settings_is_its_own_config():
    @dataclasses.dataclass
    class SelfConfigured:  # as examples/custom_agent.py's ReinforceBuilder
        unroll_length: int = 5

    assert config_type_of(SelfConfigured) is SelfConfigured


def test_class_paths_that_name_one_class():
    assert class_path(VTraceBuilder) == "builders.vtrace.VTraceBuilder"
    assert same_class_path("dqn.DQNBuilder", "examples.dqn.DQNBuilder")
    assert same_class_path("examples.dqn.DQNBuilder", "dqn.DQNBuilder")
    assert same_class_path("__main__.DQNBuilder", "examples.dqn.DQNBuilder")  # old records
    assert same_class_path("__mp_main__.DQNBuilder", "dqn.DQNBuilder")
    assert not same_class_path("a.dqn.DQNBuilder", "b.dqn.DQNBuilder")
    assert not same_class_path("dqn.DQNBuilder", "dqn.OtherBuilder")
    assert not same_class_path("builders.vtrace.VTraceBuilder", "xvtrace.VTraceBuilder")


SCRIPT = '''
import multiprocessing
import sys

from seed_agents.utils.class_paths import class_path


class MyBuilder:
    pass


def report(queue):
    queue.put(class_path(MyBuilder))


if __name__ == "__main__":
    context = multiprocessing.get_context("spawn")
    queue = context.Queue()
    child = context.Process(target=report, args=(queue,))
    child.start()
    print(class_path(MyBuilder), queue.get(timeout=120))
    child.join()
'''


def test_a_scripts_class_has_one_importable_name_in_the_script_and_its_spawned_children(
        tmp_path):
    folder = tmp_path / "pkg" / "agents"
    folder.mkdir(parents=True)
    (folder / "my_agent.py").write_text(textwrap.dedent(SCRIPT))
    ran = subprocess.run([sys.executable, str(folder / "my_agent.py")], capture_output=True,
                         text=True, timeout=300, cwd=tmp_path)
    assert ran.returncode == 0, ran.stderr[-2000:]
    assert ran.stdout.split() == ["my_agent.MyBuilder", "my_agent.MyBuilder"]
    as_module = subprocess.run([sys.executable, "-m", "pkg.agents.my_agent"],
                               capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert as_module.returncode == 0, as_module.stderr[-2000:]
    assert as_module.stdout.split() == ["pkg.agents.my_agent.MyBuilder"] * 2


def test_train_takes_an_import_path_and_its_config_overrides(plugin, tmp_path, capsys):
    from launch.commands import cli

    args = cli.build_parser().parse_args(
        ["train", "--agent", f"{plugin}:AnnotatedBuilder", "--set", "hidden=4"])
    experiment = cli.make_experiment(args)
    assert type(experiment.builder).__name__ == "AnnotatedBuilder"
    assert experiment.builder.config.hidden_sizes == (4,)  # TinyConfig(hidden=4) reached it
    assert experiment.logdir.startswith("runs/annotatedbuilder-")
    assert experiment.identity["builder"] == f"{plugin}.AnnotatedBuilder"
    status = cli.main(["train", "--agent", "no_such_module:Builder", "--steps", "10"])
    assert status == 2 and "does not import" in capsys.readouterr().err
    status = cli.main(["eval", "--agent", "nothing", "--logdir", str(tmp_path)])
    assert status == 2 and "Unknown agent 'nothing'" in capsys.readouterr().err


def test_the_command_line_parses_and_helps_without_tensorflow():
    # The builders import TensorFlow and Reverb (seconds of CPU); parsing, `--help` and a
    # bad flag need only the configs, so a user is answered at once.
    script = textwrap.dedent("""
        import contextlib, io, sys
        from launch.commands import cli
        args = cli.build_parser().parse_args(["train", "--agent", "r2d2", "--set", "lr=1"])
        assert args.agent == "r2d2", args
        for argv in (["--help"], ["train", "--help"], ["train", "--no-such-flag"]):
            out = io.StringIO()
            with contextlib.redirect_stdout(out), contextlib.redirect_stderr(out):
                try:
                    cli.main(argv)
                except SystemExit:
                    pass
            text = out.getvalue()
            assert "target_update_period=" in text or "--no-such-flag" in text or (
                "train" in text), text
            print(argv[-1], "target_update_period=" in text)
        print("tensorflow" in sys.modules, "reverb" in sys.modules)
    """)
    out = subprocess.run([sys.executable, "-c", script], capture_output=True, text=True,
                         cwd=ROOT, timeout=120)
    assert out.returncode == 0, out.stderr
    lines = out.stdout.split("\n")
    assert "--help True" in lines  # `train --help` lists the configs' fields
    assert lines[-2] == "False False", out.stdout


def test_the_shipped_configs_are_the_builders_configs():
    from launch.commands import cli
    from launch.commands.agents import builtin_agents, builtin_configs

    agents = builtin_agents()
    assert {name: config for name, (_, config) in agents.items()} == builtin_configs()
    assert cli.AGENTS == agents
    assert sorted(agents) == ["bc", "cql", "d4pg", "iql", "mpo", "r2d2", "sac", "td3",
                              "vtrace"]


def test_every_preset_builds_its_agents_config():
    from launch.commands import cli
    from launch.commands.agents import builtin_configs
    from seed_agents.utils.overrides import parse_overrides

    configs = builtin_configs()
    assert set(cli.PRESETS) == set(configs)  # every shipped agent is listed, presets or none
    built = {}
    for agent, presets in cli.PRESETS.items():
        for name, preset in presets.items():
            config = parse_overrides(configs[agent], preset)
            keys = {item.split("=", 1)[0] for item in preset}
            assert len(keys) == len(preset), f"{agent} {name} sets a field twice"
            built[(agent, name)] = config
    assert built[("mpo", "acme_baseline")].epsilon_mean == 0.01
    assert built[("mpo", "acme_baseline")].n_step == 4
    assert built[("mpo", "dmpo")].critic_type == "categorical"
    assert built[("mpo", "dmpo")].epsilon_mean == 0.01
    assert built[("mpo", "dmpo_large")].critic_type == "categorical"
    assert built[("mpo", "dmpo_large")].actor_hidden_sizes == (256, 256, 256)
    assert built[("mpo", "dmpo_large")].critic_hidden_sizes == (512, 512, 256)


def test_train_help_lists_a_plugins_config_fields(plugin, capsys):
    from launch.commands import cli

    with pytest.raises(SystemExit):
        cli.main(["train", "--agent", f"{plugin}:AnnotatedBuilder", "--help"])
    text = capsys.readouterr().out
    assert f"{plugin}:AnnotatedBuilder config fields" in text and "  hidden=8" in text
    assert cli.main(["train", "--agent=nothing:Builder", "-h"]) == 2
    assert "does not import" in capsys.readouterr().err


UNFROZEN = '''
import dataclasses

from builders.sac import SACBuilder
from seed_agents.agents.sac.config import SACConfig


@dataclasses.dataclass
class MyConfig(SACConfig):
    extra: int = 1


class MyBuilder(SACBuilder):
    config_type = MyConfig
'''


def test_a_plugin_config_that_is_not_frozen_is_refused_naming_its_class(tmp_path,
                                                                        monkeypatch):
    (tmp_path / "unfrozen_plugin.py").write_text(UNFROZEN)
    monkeypatch.syspath_prepend(str(tmp_path))
    try:
        with pytest.raises(ValueError, match=r"unfrozen_plugin\.MyConfig extends a frozen "
                                             r"config.*dataclass\(frozen=True\)"):
            resolve_agent("unfrozen_plugin:MyBuilder")
    finally:
        sys.modules.pop("unfrozen_plugin", None)
