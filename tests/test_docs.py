"""The documentation's commands work as they are written.

Every fenced shell block of README.md and docs/ is read command by command:

* `seed-agents ...` (also `.venv/bin/seed-agents`, `python -m launch.commands.cli`) must
  parse with the real parser, and `train` must build its experiment as `seed-agents train`
  builds it (agent, preset, every `--set`, and each setting of a `--seeds`/`--grid` sweep or
  a `--search`), without starting anything;
* `python benchmarks/X.py ...`, `python examples/X.py ...` and `python -m module ...` must
  name a file of this repository whose source has every `--flag` used;
* `pip install` and `bash .ci/run` must name extras that setup.cfg defines;
* anything else must be in `ALLOWED`, with the reason it cannot be checked here.

A block whose opening fence follows the line `<!-- needs a cluster -->` is exempt (its page
says so in words too); the README's tour, the block after `<!-- tour -->`, is run for real.
The pages generated when the site is built (docs/hooks/reference.py) are not read here: they
are made from the parser and the configs themselves.
"""

from __future__ import annotations

import configparser
import contextlib
import dataclasses
import importlib.util
import io
import os
import re
import shlex
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
DOCS = ROOT / "docs"
HOOK = DOCS / "hooks" / "reference.py"
SHELLS = ("bash", "sh", "shell", "console")
NEEDS_CLUSTER = "<!-- needs a cluster -->"
TOUR = "<!-- tour -->"
README_MAX_LINES = 250

ALLOWED = {
    "python3.11 -m venv": "creates the virtualenv the first command installs into",
    "mkdocs": "the docs build itself, which CI runs as `mkdocs build --strict`",
    "tensorboard": "TensorBoard's viewer of a run's event files; it serves until stopped",
}
"""Commands the docs may show that no test here can check, each with the reason."""

TOUR_SECONDS = 600
"""A tour command that takes longer than this has outgrown the tour (it takes seconds)."""


@dataclasses.dataclass(frozen=True)
class Block:
    """A fenced code block of a page: its language and the line before its fence."""

    path: Path
    line: int  # of the opening fence, 1-based
    language: str
    marker: str
    text: str

    @property
    def name(self) -> str:
        return f"{self.path.relative_to(ROOT)}:{self.line}"

    def commands(self) -> list[list[str]]:
        """The block's commands as argument lists: continued lines joined, comments and
        leading `VAR=value` assignments dropped, `&&` and `;` separating commands; in a
        `console` block, only the lines after a `$ ` prompt."""
        lines, joined = [], ""
        for line in self.text.splitlines():
            if self.language == "console":
                if not (joined or line.startswith("$ ")):
                    continue  # the output of a command
                line = line.removeprefix("$ ")
            if line.rstrip().endswith("\\"):
                joined += line.rstrip()[:-1] + " "
                continue
            lines.append(joined + line)
            joined = ""
        commands: list[list[str]] = []
        for line in lines:
            command: list[str] = []
            for token in [*shlex.split(line, comments=True), ";"]:
                if token in ("&&", ";") or token.endswith(";"):
                    if token.endswith(";") and token != ";":
                        command.append(token[:-1])
                    while command and re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*=.*", command[0]):
                        command.pop(0)
                    if command:
                        commands.append(command)
                    command = []
                else:
                    command.append(token)
        return commands


def _pages() -> list[Path]:
    """README.md and the pages written by hand (not the hook's code)."""
    return [README, *sorted(p for p in DOCS.rglob("*.md") if "hooks" not in p.parts)]


def _blocks(path: Path) -> list[Block]:
    lines = path.read_text().splitlines()
    blocks, i = [], 0
    while i < len(lines):
        fence = re.match(r"^(\s*)(`{3,})\s*([\w+-]*)", lines[i])
        if not fence:
            i += 1
            continue
        indent, ticks, language = fence.groups()
        body, start = [], i
        i += 1
        while i < len(lines) and not lines[i].strip().startswith(ticks):
            body.append(lines[i][len(indent):] if lines[i].startswith(indent) else lines[i])
            i += 1
        marker = lines[start - 1].strip() if start else ""
        blocks.append(Block(path, start + 1, language.lower(), marker, "\n".join(body)))
        i += 1
    return blocks


SHELL_BLOCKS = [b for page in _pages() for b in _blocks(page) if b.language in SHELLS]


def _hook():
    spec = importlib.util.spec_from_file_location("docs_reference_hook", HOOK)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


def _extras() -> set[str]:
    config = configparser.ConfigParser()
    config.read(ROOT / "setup.cfg")
    return set(config["options.extras_require"])


# --- what a command is -------------------------------------------------------------------------


def _seed_agents_args(argv: list[str]) -> list[str] | None:
    """The arguments after the program when `argv` runs the seed-agents command line."""
    program = Path(argv[0]).name
    if program == "seed-agents":
        return argv[1:]
    if re.fullmatch(r"python[\d.]*", program) and argv[1:3] == ["-m", "launch.commands.cli"]:
        return argv[3:]
    return None


def _is_python(argv: list[str]) -> bool:
    return bool(re.fullmatch(r"python[\d.]*", Path(argv[0]).name))


def _flags(arguments: list[str]) -> list[str]:
    """The `--flags` among `arguments`, placeholders such as `[--transport grpc]` included."""
    flags = []
    for argument in arguments:
        match = re.match(r"^\[?(--[A-Za-z0-9][\w-]*)", argument)
        if match:
            flags.append(match[1])
    return flags


def _check_source(path: Path, arguments: list[str]) -> None:
    assert path.is_file(), f"{path.relative_to(ROOT)} does not exist"
    source = path.read_text()
    missing = [flag for flag in _flags(arguments) if f'"{flag}"' not in source
               and f"'{flag}'" not in source]
    assert not missing, f"{path.relative_to(ROOT)} takes no {', '.join(missing)}"


def _check_pip(argv: list[str]) -> None:
    targets = [a for a in argv[argv.index("install") + 1:] if not a.startswith("-")]
    assert targets, f"`{shlex.join(argv)}` installs nothing"
    for target in targets:
        match = re.fullmatch(r"(?:\.|seed-agents)(?:\[([\w,-]+)\])?", target)
        assert match, (f"`{shlex.join(argv)}` installs {target!r}, not this project: mark its "
                       f"block `{NEEDS_CLUSTER}` or check it here")
        unknown = set((match[1] or "").split(",")) - {""} - _extras()
        assert not unknown, f"setup.cfg has no extra {', '.join(sorted(unknown))}"


def _check_ci(argv: list[str]) -> None:
    script = ROOT / argv[1]
    assert script.is_file(), f"{argv[1]} does not exist"
    for extras in re.findall(r"\.\[([\w,-]+)\]", script.read_text()):
        unknown = set(extras.split(",")) - _extras()
        assert not unknown, f"{argv[1]} installs extras setup.cfg lacks: {unknown}"


def _allowed(argv: list[str]) -> str | None:
    program = Path(argv[0]).name
    for key in (" ".join([program, *argv[1:3]]), " ".join([program, *argv[1:2]]), program):
        if key in ALLOWED:
            return key
    return None


def _check_seed_agents(arguments: list[str], build: bool = True) -> None:
    """Parses `arguments` as `seed-agents` does; builds what `train` would run."""
    from launch.commands.agents import agent_table
    from launch.commands.cli import build_parser, make_experiment
    from launch.studies.sweeps import check_runs, parse_grid, parse_seeds, plan_sweep
    from launch.studies.tuning import parse_search, plan_trial

    errors = io.StringIO()
    try:
        with contextlib.redirect_stderr(errors):
            args = build_parser().parse_args(arguments)
    except SystemExit:
        pytest.fail(f"seed-agents refuses `{shlex.join(arguments)}`: {errors.getvalue()}")
    if not build:
        return
    if args.command != "train":
        if getattr(args, "agent", None):
            agent_table(args.agent)  # eval, export, record: the code `--agent` names
        return
    # As `seed-agents train` does (launch/studies/sweeps.py, tuning.py): every setting's
    # experiment is built before anything starts.
    if args.search:
        runs = [plan_trial("PARENT", args.seed, [f"{space.key}={value}"])
                for space in parse_search(args.search) for value in space.values]
        check_runs(args, runs, make_experiment)
    elif args.seeds or args.grid:
        seeds = parse_seeds(args.seeds) if args.seeds else (args.seed,)
        check_runs(args, plan_sweep("PARENT", seeds, parse_grid(args.grid)), make_experiment)
    else:
        make_experiment(args)


def _check_command(argv: list[str]) -> str:
    """Checks one command of a block that is not exempt; returns what kind it was."""
    arguments = _seed_agents_args(argv)
    if arguments is not None:
        _check_seed_agents(arguments)
        return "seed-agents"
    if (allowed := _allowed(argv)) is not None:
        return allowed
    if Path(argv[0]).name == "pip" or (_is_python(argv) and argv[1:3] == ["-m", "pip"]):
        _check_pip(argv)
        return "pip"
    if argv[:2] == ["bash", ".ci/run"]:
        _check_ci(argv)
        return "ci"
    if _is_python(argv) and len(argv) > 1 and argv[1].endswith(".py"):
        _check_source(ROOT / argv[1], argv[2:])
        return "script"
    if _is_python(argv) and len(argv) > 2 and argv[1] == "-m":
        _check_source(ROOT / (argv[2].replace(".", "/") + ".py"), argv[3:])
        return "module"
    pytest.fail(f"`{shlex.join(argv)}`: no test checks this command; check it in "
                f"tests/test_docs.py, add it to ALLOWED with a reason, or mark its block "
                f"`{NEEDS_CLUSTER}`")


# --- the tests ---------------------------------------------------------------------------------


@pytest.mark.parametrize("block", SHELL_BLOCKS, ids=lambda b: b.name)
def test_every_command_in_the_docs_is_checked(block, monkeypatch):
    monkeypatch.chdir(ROOT)  # as a reader runs them: from a checkout, `examples.` importable
    if block.marker == NEEDS_CLUSTER:
        # Nothing here can run them; what seed-agents is told to do must still parse (a
        # command quoted for `ray exec` included).
        for argv in block.commands():
            for command in [argv, *(shlex.split(a) for a in argv if " " in a)]:
                arguments = _seed_agents_args(command)
                if arguments is not None:
                    _check_seed_agents(arguments, build=False)
        return
    commands = block.commands()
    assert commands, f"{block.name}: a shell block without a command"
    for argv in commands:
        _check_command(argv)


def test_blocks_that_need_a_cluster_say_so_on_their_page():
    for path in {b.path for b in SHELL_BLOCKS if b.marker == NEEDS_CLUSTER}:
        prose = re.sub(r"<!--.*?-->", "", path.read_text())
        assert re.search(r"\bneeds? a (Ray |Kubernetes )?cluster\b", prose), (
            f"{path.relative_to(ROOT)} marks blocks {NEEDS_CLUSTER} but never says in words "
            "that they need a cluster")


def test_every_allowed_command_is_shown_somewhere():
    # An entry no page uses any more is an exemption nobody reviews.
    used = {_allowed(argv) for b in SHELL_BLOCKS if b.marker != NEEDS_CLUSTER
            for argv in b.commands()}
    assert set(ALLOWED) <= used, f"unused: {sorted(set(ALLOWED) - used)}"


def test_inline_benchmark_and_example_commands_name_real_flags():
    # `python benchmarks/learn_pong.py --frames ...` in running text (or without `python`):
    # the script exists and takes those flags.
    pattern = re.compile(r"`(?:(?:\.venv/bin/)?python[\d.]* )?((?:benchmarks|examples)/\w+\.py"
                         r"(?: [^`]*)?)`")
    seen = 0
    for page in _pages():
        for command in pattern.findall(page.read_text()):
            script, *arguments = command.split()
            _check_source(ROOT / script, arguments)
            seen += 1
    assert seen, "no inline benchmark command found: has the pattern gone stale?"


def test_documented_agent_settings_are_fields_of_the_agents_config():
    # `--set mpo:epsilon_mean=0.04` in running text (a benchmark's command, quoted in part
    # where a page reports what a setting did): the agent exists and its config takes the
    # field and value, so a renamed field cannot leave the page telling of one that is gone.
    from launch.commands.agents import builtin_agents
    from seed_agents.utils.overrides import parse_overrides

    agents = builtin_agents()
    pattern = re.compile(r"--set\s+(\w+):(\w+=[^\s`]+)")
    seen = 0
    for page in _pages():
        for agent, setting in pattern.findall(page.read_text()):
            where = f"{page.relative_to(ROOT)}: --set {agent}:{setting}"
            assert agent in agents, f"{where}: no built-in agent {agent!r}"
            try:
                parse_overrides(agents[agent][1], [setting])
            except ValueError as error:
                pytest.fail(f"{where}: {error}")
            seen += 1
    assert seen, "no `--set agent:key=value` found: has the pattern gone stale?"


def test_readme_is_a_short_front_page_that_starts_with_the_two_commands():
    lines = README.read_text().splitlines()
    assert len(lines) < README_MAX_LINES, f"README.md has {len(lines)} lines"
    blocks = _blocks(README)
    train, tests = blocks[0], blocks[1]
    assert train.language == tests.language == "bash"
    assert train.text.startswith("python3.11 -m venv .venv && .venv/bin/pip install -q -e . && "
                                 ".venv/bin/seed-agents train ")
    assert tests.text.strip() == "bash .ci/run"
    tours = [b for page in _pages() for b in _blocks(page) if b.marker == TOUR]
    assert [b.path for b in tours] == [README], "one tour, in README.md"


def test_readme_links_to_pages_that_exist():
    # README.md is read on GitHub too, where `docs/<page>.md` is a file of the checkout.
    for target in re.findall(r"\]\((docs/[^)#]+)(?:#[^)]*)?\)", README.read_text()):
        assert (ROOT / target).is_file(), f"README.md links to {target}, which is missing"


def _nav_pages(nav) -> list[str]:
    if isinstance(nav, str):
        return [nav]
    if isinstance(nav, dict):
        return [page for value in nav.values() for page in _nav_pages(value)]
    return [page for entry in nav for page in _nav_pages(entry)]


def test_every_page_is_in_the_nav_and_every_nav_entry_exists():
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text())
    assert config["docs_dir"] == "docs" and config["theme"]["name"] == "material"
    assert config["hooks"] == [str(HOOK.relative_to(ROOT))]
    nav = _nav_pages(config["nav"])
    assert len(nav) == len(set(nav)), "a page is in the nav twice"
    generated = set(_hook().GENERATED)
    written = {p.relative_to(DOCS).as_posix() for p in _pages() if p != README}
    assert not written & generated, f"generated pages also in docs/: {written & generated}"
    assert set(nav) - written - generated == set(), "nav entries without a page"
    assert (written | generated) - set(nav) == set(), "pages missing from the nav"


def _run_tour_command(arguments: list[str], cwd: Path) -> subprocess.CompletedProcess:
    # Its own session, so that a timeout stops a sweep's runs too, not only the sweep.
    env = {**os.environ,
           "PYTHONPATH": os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")]))}
    process = subprocess.Popen([sys.executable, "-m", "launch.commands.cli", *arguments],
                               cwd=cwd, env=env, stdout=subprocess.PIPE,
                               stderr=subprocess.STDOUT, text=True, start_new_session=True)
    try:
        output, _ = process.communicate(timeout=TOUR_SECONDS)
    except subprocess.TimeoutExpired:
        os.killpg(process.pid, signal.SIGKILL)
        output, _ = process.communicate()
        pytest.fail(f"`seed-agents {shlex.join(arguments)}` ran over {TOUR_SECONDS} s:\n"
                    f"{output[-3000:]}")
    return subprocess.CompletedProcess(process.args, process.returncode, output)


def test_the_tour_runs_as_written(tmp_path):
    (tour,) = [b for b in _blocks(README) if b.marker == TOUR]
    seconds = []
    for argv in tour.commands():
        if Path(argv[0]).name == "pip":
            _check_pip(argv)  # the test extra holds what it installs; nothing to fetch here
            continue
        arguments = _seed_agents_args(argv)
        assert arguments is not None, f"the tour runs seed-agents only, not `{argv[0]}`"
        start = time.monotonic()
        result = _run_tour_command(arguments, tmp_path)
        seconds.append(f"{arguments[0]} {time.monotonic() - start:.1f} s")
        assert result.returncode == 0, (f"`seed-agents {shlex.join(arguments)}` exited with "
                                        f"{result.returncode}:\n{result.stdout[-3000:]}")
    print("tour:", ", ".join(seconds))
    runs = tmp_path / "runs"
    for path in ("tour/run.json", "tour/train.csv", "tour/learner.csv", "tour.png",
                 "tour-seeds/default/seed-0/result.json", "tour-seeds/default/seed-1/result.json",
                 "tour-seeds/compare.csv"):
        assert (runs / path).is_file(), f"the tour left no runs/{path}"
    assert list((runs / "tour" / "checkpoints" / "learner").iterdir()), "no checkpoint"
    assert list((runs / "tour" / "tb").iterdir()), "no TensorBoard events"
    assert len(list((runs / "tour" / "eval").glob("*.json"))) == 1, "no eval results"
