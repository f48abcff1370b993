"""Learning from recorded datasets end to end: train --record, seed-agents record, the
offline agents (BC, CQL, IQL, TD3+BC) and existing learners on a dataset, eval of an
offline run, and the command line's errors."""

from __future__ import annotations

import contextlib
import csv
import dataclasses
import io
import json
from pathlib import Path

import numpy as np
import pytest
import reverb

from builders.bc import BCBuilder
from builders.cql import CQLBuilder
from builders.iql import IQLBuilder
from builders.sac import SACBuilder
from builders.td3 import TD3Builder
from launch.backends.inprocess import run_inprocess
from launch.backends.offline import run_offline
from launch.commands import cli
from launch.experiment import Experiment
from seed_agents.agents.bc.config import BCConfig
from seed_agents.agents.cql.config import CQLConfig
from seed_agents.agents.iql.config import IQLConfig
from seed_agents.agents.sac.config import SACConfig
from seed_agents.agents.td3.config import TD3Config
from seed_agents.datasets import iterate_episodes, load_replay, open_dataset
from seed_agents.envs import environment_factory
from seed_agents.specs import make_environment_spec
from tests.test_datasets import CARTPOLE, record_cartpole

SAC = SACConfig(actor_hidden_sizes=(16,), critic_hidden_sizes=(16,), batch_size=8,
                min_replay_size=32, samples_per_insert=2.0, replay_size=2_000)


@pytest.fixture(scope="module")
def pendulum_recording(tmp_path_factory):
    """A short SAC run on Pendulum (1 evaluation environment of 4) that records."""
    root = tmp_path_factory.mktemp("pendulum")
    experiment = Experiment(builder=SACBuilder(SAC), environment="gym:Pendulum-v1",
                            num_runners=1, envs_per_runner=4, max_env_steps=1_500,
                            logdir=str(root / "run"), record=str(root / "dataset"),
                            log_every_s=0.5, evaluate_every_s=None)
    result = run_inprocess(experiment, stream=io.StringIO())
    return root / "dataset", result


def test_train_record_keeps_every_training_episode_and_no_evaluation_one(pendulum_recording):
    path, result = pendulum_recording
    dataset = open_dataset(path)
    assert dataset.spec.complete and dataset.spec.behaviour["source"] == "train"
    # Pendulum episodes last 200 steps; 3 training environments over 1,500 env steps.
    assert dataset.episodes == result.episodes >= 6
    lengths = {len(e["step_type"]) for e in iterate_episodes(path)}
    assert lengths == {201}  # FIRST + 200 steps: whole episodes only
    assert dataset.spec.action["shape"] == [1] and dataset.spec.action["dtype"] == "float32"


def test_the_sac_learner_trains_unchanged_on_a_recorded_pendulum_dataset(pendulum_recording):
    path, _ = pendulum_recording
    spec = make_environment_spec(environment_factory("gym:Pendulum-v1")(0))
    builder = SACBuilder(SAC)
    networks = builder.make_networks(spec)
    policy = builder.make_policy(networks, spec)
    replay = load_replay(str(path), builder, spec, policy, "gym:Pendulum-v1")
    try:
        # One n-step transition per action taken: 200 per episode.
        assert replay.items == 200 * replay.episodes
        # Closed while the replay is up: a learner's dataset stream left to the garbage
        # collector after its server stopped holds the collection for seconds.
        with contextlib.closing(builder.make_learner(networks, replay.address)) as learner:
            for _ in range(5):
                metrics = learner.step()
        assert learner.num_steps == 5
        assert all(np.isfinite(v) for v in metrics.values())
    finally:
        replay.server.stop()


@pytest.mark.parametrize("builder", [
    BCBuilder(BCConfig(batch_size=16, hidden_sizes=(16,))),
    IQLBuilder(IQLConfig(batch_size=16, hidden_sizes=(16,), critic_hidden_sizes=(16,))),
    TD3Builder(TD3Config(batch_size=16, actor_hidden_sizes=(16,), critic_hidden_sizes=(16,),
                         min_replay_size=16, bc_alpha=2.5)),
], ids=["bc", "iql", "td3_bc"])
def test_continuous_offline_agents_train_and_evaluate_on_pendulum(pendulum_recording,
                                                                  tmp_path, builder):
    path, _ = pendulum_recording
    experiment = Experiment(builder=builder,
                            environment="gym:Pendulum-v1", dataset=str(path),
                            max_learner_steps=30, logdir=str(tmp_path / "bc"),
                            evaluate_every_s=None, log_every_s=0.5)
    result = run_offline(experiment, stream=io.StringIO(), final_eval_episodes=1)
    assert result.learner_steps == 30 and len(result.eval_returns) == 1
    assert np.isfinite(result.eval_mean_return)
    with open(tmp_path / "bc" / "learner.csv") as f:
        last = list(csv.DictReader(f))[-1]
    loss = last.get("critic_loss") or last["loss"]  # the critics', BC's own
    assert np.isfinite(float(loss)) and np.isfinite(float(last.get("actor_loss") or 0.0))


@dataclasses.dataclass
class _BCNotingItsClose(BCBuilder):
    """BC whose learner, as it is closed, asks its replay for its tables first."""

    closes: list = dataclasses.field(default_factory=list)

    def make_learner(self, networks, replay_address, counter=None, logger=None):
        learner = super().make_learner(networks, replay_address, counter, logger)
        close = learner.close

        def close_while_the_replay_answers():
            # Raises once the server has stopped: the test then fails naming it.
            self.closes.append(reverb.Client(replay_address).server_info(timeout=30))
            close()

        learner.close = close_while_the_replay_answers
        return learner


def test_an_offline_run_closes_its_learner_while_the_replay_is_up(pendulum_recording,
                                                                  tmp_path):
    # The learner's dataset streams must close before the replay stops: left to the
    # garbage collector after it, each blocks a collection for tens of seconds.
    path, _ = pendulum_recording
    builder = _BCNotingItsClose(BCConfig(batch_size=16, hidden_sizes=(16,)))
    experiment = Experiment(builder=builder, environment="gym:Pendulum-v1", dataset=str(path),
                            max_learner_steps=5, logdir=str(tmp_path / "bc"),
                            evaluate_every_s=None)
    run_offline(experiment, stream=io.StringIO(), final_eval_episodes=0)
    assert len(builder.closes) == 1 and builder.closes[0]  # the replay named its table


def test_td3_bc_trains_offline_from_the_command_line(pendulum_recording, tmp_path, capsys):
    path, _ = pendulum_recording
    code = cli.main(["train", "--agent", "td3", "--preset", "td3_bc", "--env",
                     "gym:Pendulum-v1", "--dataset", str(path), "--steps", "40",
                     "--logdir", str(tmp_path / "td3_bc"), "--set", "actor_hidden_sizes=16,",
                     "--set", "critic_hidden_sizes=16,", "--set", "batch_size=8",
                     "--set", "min_replay_size=8"])
    out = capsys.readouterr()
    assert code == 0, out.err[-3000:]
    assert "learner steps: 40" in out.out and "final evaluation: 10 greedy" in out.out
    record = json.loads((tmp_path / "td3_bc" / "run.json").read_text())
    assert record["config"]["bc_alpha"] == 2.5  # the preset reached the agent


def test_iql_refuses_discrete_actions_naming_the_spec():
    with pytest.raises(ValueError, match="IQL learns continuous actions.*DiscreteArray"):
        Experiment(IQLBuilder(), CARTPOLE, dataset="unused").environment_spec()


@pytest.fixture(scope="module")
def heuristic_dataset(tmp_path_factory):
    path = tmp_path_factory.mktemp("heuristic") / "dataset"
    _, returns = record_cartpole(path, episodes=30, epsilon=0.3)
    return path, float(np.mean(returns))


def _random_return(episodes: int = 20) -> float:
    env = environment_factory(CARTPOLE)(5)
    rng = np.random.default_rng(5)
    total = 0.0
    for _ in range(episodes):
        timestep = env.reset()
        while not timestep.last():
            timestep = env.step(np.int32(rng.integers(2)))
            total += timestep.reward
    env.close()
    return total / episodes


# A learning check (the suite's slowest test, 129 s for CQL on a loaded machine): opt-in
# with `pytest -m slow`; benchmarks/learn_offline.py measures the same at full scale. The
# mechanism (a dataset in, learner steps, evaluation out) is the 30-step test above.
@pytest.mark.slow
@pytest.mark.parametrize("builder", [
    BCBuilder(BCConfig(batch_size=64, hidden_sizes=(64, 64))),
    CQLBuilder(CQLConfig(batch_size=64, hidden_sizes=(64, 64), target_update_period=50)),
], ids=["bc", "cql"])
def test_offline_agents_learn_a_good_cartpole_policy_from_noisy_data(builder,
                                                                     heuristic_dataset,
                                                                     tmp_path):
    path, data_return = heuristic_dataset
    experiment = Experiment(builder=builder, environment=CARTPOLE, dataset=str(path),
                            max_learner_steps=600, logdir=str(tmp_path / "run"),
                            evaluate_every_s=None, log_every_s=1.0)
    result = run_offline(experiment, stream=io.StringIO(), final_eval_episodes=5)
    random = _random_return()
    # The heuristic with 30% random actions; a greedy policy learned from it drops the
    # noise and is far better than random play.
    assert data_return > 3 * random
    assert result.eval_mean_return > 3 * random, (result.eval_returns, random)
    assert result.learner_steps == 600


def _main(*args: str) -> int:
    return cli.main(list(args))


def test_record_train_offline_and_eval_from_the_command_line(tmp_path, capsys):
    run, dataset = tmp_path / "vtrace", tmp_path / "recorded"
    common = ["--env", CARTPOLE, "--log-every-s", "0.5", "--evaluate-every-s", "0"]
    assert _main("train", "--agent", "vtrace", "--steps", "1500", "--runners", "2",
                 "--envs-per-runner", "2", "--logdir", str(run), "--record",
                 str(tmp_path / "training"), "--set", "unroll_length=5",
                 "--set", "batch_size=4", *common) == 0
    assert open_dataset(tmp_path / "training").spec.extras["logits"]["shape"] == [2]

    assert _main("record", "--logdir", str(run), "--episodes", "6", "--out", str(dataset),
                 "--epsilon", "0.3", "--seed", "3", "--envs", "4") == 0
    out = capsys.readouterr().out
    assert "dataset: " in out and "6 episodes" in out
    spec = open_dataset(dataset).spec
    assert spec.episodes == 6 and spec.behaviour["epsilon"] == 0.3
    assert spec.behaviour["logdir"] == str(run)

    offline = tmp_path / "cql"
    assert _main("train", "--agent", "cql", "--dataset", str(dataset), "--steps", "40",
                 "--logdir", str(offline), "--set", "batch_size=16", *common) == 0
    out = capsys.readouterr().out
    assert "learner steps: 40" in out and "final evaluation: 10 greedy episodes" in out
    assert json.loads((offline / "run.json").read_text())["experiment"]["dataset"] \
        == str(dataset)

    results = tmp_path / "eval.json"
    assert _main("eval", "--logdir", str(offline), "--episodes", "2", "--json",
                 str(results)) == 0
    assert json.loads(results.read_text())["episodes"] == 2
    capsys.readouterr()
    assert _main("plot", str(offline), "--out", str(tmp_path / "curves.png")) == 2
    assert "learned offline from a dataset" in capsys.readouterr().err


@pytest.mark.parametrize("args, message", [
    (["train", "--agent", "bc"], "learns from a recorded dataset only"),
    (["train", "--agent", "bc", "--dataset", "{missing}"], "does not exist"),
    (["train", "--agent", "bc", "--dataset", "{dataset}", "--env", "fake:obs=6"],
     "spec.json: the dataset's observations are (4,) float32"),
    (["train", "--agent", "cql", "--dataset", "{dataset}", "--backend", "local_mp"],
     "--dataset runs in process"),
    (["train", "--agent", "vtrace", "--record", "{dataset}"], "is not an empty directory"),
    (["train", "--agent", "vtrace", "--record", "{new}", "--inference", "local",
      "--envs-per-runner", "1"], "use inference='central'"),
])
def test_command_line_errors_name_what_is_wrong(args, message, heuristic_dataset, tmp_path,
                                                capsys):
    path, _ = heuristic_dataset
    names = {"missing": str(tmp_path / "missing"), "dataset": str(path),
             "new": str(tmp_path / "new")}
    args = [a.format(**names) for a in args]
    before = sorted(p.name for p in Path(path).iterdir())
    assert _main(*args, "--logdir", str(tmp_path / "run")) == 2
    assert message in capsys.readouterr().err
    assert sorted(p.name for p in Path(path).iterdir()) == before
    assert not (tmp_path / "run").exists() and not (tmp_path / "new").exists()


def test_record_into_a_taken_rlds_directory_under_home_is_refused(heuristic_dataset,
                                                                   tmp_path, monkeypatch,
                                                                   capsys):
    """`--record rlds:~/DIR` is checked where the writer would write: the user's home."""
    path, _ = heuristic_dataset
    monkeypatch.setenv("HOME", str(Path(path).parent))
    before = sorted(p.name for p in Path(path).iterdir())
    assert _main("train", "--agent", "vtrace", "--record", f"rlds:~/{Path(path).name}",
                 "--logdir", str(tmp_path / "run")) == 2
    assert "is not an empty directory" in capsys.readouterr().err
    assert sorted(p.name for p in Path(path).iterdir()) == before
    assert not (tmp_path / "run").exists()


def test_rlds_datasets_written_by_record_and_by_training_train_an_offline_agent(
        pendulum_recording, tmp_path, capsys):
    """`record --format rlds` and `train --record rlds:DIR` write RLDS (TFDS) datasets;
    `--dataset rlds:DIR` trains IQL on either, and a dataset of another task is refused
    naming both specs."""
    import tensorflow_datasets as tfds

    path, _ = pendulum_recording
    run = path.parent / "run"
    out = tmp_path / "recorded_rlds"
    assert cli.main(["record", "--logdir", str(run), "--episodes", "3", "--out", str(out),
                     "--format", "rlds", "--noise", "0.1", "--envs", "3"]) == 0
    assert "3 episodes, 603 steps" in capsys.readouterr().out  # each: FIRST + 200 steps
    episodes = list(tfds.builder_from_directory(str(out)).as_dataset(split="train"))
    assert len(episodes) == 3  # read by TFDS itself, as another toolkit would
    steps = list(episodes[0]["steps"])
    assert len(steps) == 201 and bool(steps[0]["is_first"]) and bool(steps[-1]["is_last"])
    assert steps[0]["action"].shape == (1,) and steps[0]["observation"].shape == (3,)

    trained = tmp_path / "trained_rlds"
    experiment = Experiment(builder=SACBuilder(SAC), environment="gym:Pendulum-v1",
                            num_runners=1, envs_per_runner=2, max_env_steps=450,
                            record=f"rlds:{trained}", evaluate_every_s=None)
    run_inprocess(experiment, stream=io.StringIO())
    assert len(list(tfds.builder_from_directory(str(trained)).as_dataset(
        split="train"))) >= 1  # one training environment (of 2), 200-step episodes

    for dataset in (out, trained):
        code = cli.main(["train", "--agent", "iql", "--env", "gym:Pendulum-v1", "--dataset",
                         f"rlds:{dataset}", "--steps", "20", "--logdir",
                         str(tmp_path / f"iql_{dataset.name}"), "--set", "hidden_sizes=16,",
                         "--set", "critic_hidden_sizes=16,", "--set", "batch_size=8"])
        result = capsys.readouterr()
        assert code == 0, result.err[-3000:]
        assert "learner steps: 20" in result.out
    code = cli.main(["train", "--agent", "iql", "--env", "dmc:cartpole-swingup", "--dataset",
                     f"rlds:{out}", "--steps", "20"])
    assert code == 2
    assert "gym:Pendulum-v1" in capsys.readouterr().err
