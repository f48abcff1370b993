"""MkDocs hook (mkdocs.yml `hooks:`): the pages made from the repository when the site is built.

* `index.md`, the home page, is README.md, so the front page and the site's home are one
  text; README links to the pages as `docs/<page>.md` (which GitHub follows), and here
  those links lose their `docs/` prefix.
* `reference/cli.md` is the `--help` of `seed-agents` and of each of its commands, from the
  parser itself (`launch.commands.cli.build_parser`).
* `reference/configs.md` is each shipped agent's config dataclass as a table of its fields:
  type, default and what the class's docstring says of the field.

None of them is a file in docs/: they are added to the build's files (`on_files`), so a
flag or a field can never be documented in a version the code no longer has. Rendering
imports the package, and with it TensorFlow (a few seconds per build).

This module imports only the standard library at the top, so that tests/test_docs.py can
read `GENERATED` without MkDocs installed.
"""

from __future__ import annotations

import argparse
import contextlib
import dataclasses
import inspect
import os
import re
import sys
from collections.abc import Callable, Iterator
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
README = ROOT / "README.md"
HOME = "index.md"
CLI = "reference/cli.md"
CONFIGS = "reference/configs.md"
GENERATED = (HOME, CLI, CONFIGS)
"""The pages this hook adds to the site (paths under docs/, as mkdocs.yml's nav names them)."""

HELP_COLUMNS = 100
"""The width `--help` is wrapped to on the reference page (argparse reads $COLUMNS)."""

# A docstring entry that documents fields: "  name: text" or "  a, b: text" (Google style,
# under any section heading: "Attributes:", "Replay:", "SAC's own:"). Only names that are
# fields of the config count, so a prose line that happens to match is ignored.
_FIELD_ENTRY = re.compile(r"^(?P<indent> +)(?P<names>[a-z_][a-z0-9_]*(?:, [a-z_][a-z0-9_]*)*)"
                          r": (?P<text>\S.*)$")


def home_page() -> str:
    """README.md with its `docs/` links made relative to the site's root."""
    return re.sub(r"\]\(docs/", "](", README.read_text())


@contextlib.contextmanager
def _columns(width: int) -> Iterator[None]:
    # argparse wraps help to the terminal's width ($COLUMNS first): pinned, the page is the
    # same whoever builds it.
    before = os.environ.get("COLUMNS")
    os.environ["COLUMNS"] = str(width)
    try:
        yield
    finally:
        if before is None:
            del os.environ["COLUMNS"]
        else:
            os.environ["COLUMNS"] = before


def _commands(parser: argparse.ArgumentParser) -> list[tuple[str, argparse.ArgumentParser]]:
    """The parser and each of its subcommands' parsers, in the order they were added."""
    commands = [(parser.prog, parser)]
    for action in parser._actions:  # argparse keeps subcommands in this private list only
        if isinstance(action, argparse._SubParsersAction):
            commands += [(sub.prog, sub) for sub in action.choices.values()]
    return commands


def cli_page() -> str:
    from launch.commands.cli import build_parser

    parts = [
        "# Command line",
        "Every command's `--help`, made from the parser when this site was built "
        "(`launch.commands.cli.build_parser()`), so it matches the code it was built from. "
        "`seed-agents train --help` goes on to list every agent's config fields with their "
        "defaults; [Configs](configs.md) has them with their types and meaning.",
    ]
    for prog, parser in _commands(build_parser()):
        parser.epilog = None  # train's: the config fields, on the Configs page instead
        with _columns(HELP_COLUMNS):
            text = parser.format_help()
        parts += [f"## `{prog}`", f"```text\n{text.rstrip()}\n```"]
    return "\n\n".join(parts) + "\n"


def field_docs(config_type: type) -> dict[str, str]:
    """field name -> what the docstrings of `config_type` and its bases say of it.

    A subclass's entry wins over its base's: the class that is used describes it last.
    """
    names = {f.name for f in dataclasses.fields(config_type)}
    docs: dict[str, str] = {}
    for klass in reversed(config_type.__mro__):
        # The class's own docstring only: an inherited __doc__ would be read twice.
        lines = inspect.cleandoc(vars(klass).get("__doc__") or "").splitlines()
        for i, line in enumerate(lines):
            match = _FIELD_ENTRY.match(line)
            if not match:
                continue
            entry = [s.strip() for s in match["names"].split(",")]
            if not set(entry) <= names:
                continue
            text = [match["text"]]
            indent = len(match["indent"])
            for more in lines[i + 1:]:
                if not more.strip() or len(more) - len(more.lstrip()) <= indent:
                    break
                text.append(more.strip())
            for name in entry:
                docs[name] = " ".join(text)
    return docs


def _default(field: dataclasses.Field) -> str:
    # The declared default, not an instance's: a config checks itself when built, and
    # some checks import TensorFlow (as `_config_help` in launch/commands/cli.py).
    if field.default is not dataclasses.MISSING:
        return f"`{field.default!r}`"
    if field.default_factory is not dataclasses.MISSING:
        return f"`{field.default_factory()!r}`"
    return "(required)"


def _cell(text: str) -> str:
    # A table cell's `|` outside code would end the cell; inside backticks the table
    # extension leaves it alone, and an escape there would be shown as written.
    parts = re.split(r"(`[^`]*`)", text)
    return "".join(part if part.startswith("`") else part.replace("|", "\\|")
                   for part in parts)


def _summary(config_type: type) -> str:
    """The first paragraph of the class's docstring, on one line."""
    doc = inspect.cleandoc(config_type.__doc__ or "")
    return " ".join(doc.split("\n\n")[0].split())


def configs_page() -> str:
    from launch.commands.agents import builtin_configs
    from launch.commands.cli import PRESETS

    parts = [
        "# Configs",
        "Each shipped agent's config: every field is a `--set KEY=VALUE` of `seed-agents "
        "train --agent NAME` (tuples as `1,2`, None as `None`), and `--preset NAME` applies "
        "a named set of them first. Made from the dataclasses and their docstrings when this "
        "site was built.",
    ]
    for name, config_type in builtin_configs().items():
        docs = field_docs(config_type)
        parts += [f"## `--agent {name}`",
                  f"`{config_type.__module__}.{config_type.__qualname__}`: "
                  f"{_summary(config_type)}"]
        presets = PRESETS.get(name, {})
        if presets:
            rows = ["| preset | settings |", "| --- | --- |"]
            rows += [f"| `{preset}` | {', '.join(f'`{s}`' for s in settings)} |"
                     for preset, settings in presets.items()]
            parts.append("\n".join(rows))
        rows = ["| field | type | default | what |", "| --- | --- | --- | --- |"]
        for field in dataclasses.fields(config_type):
            kind = field.type if isinstance(field.type, str) else getattr(
                field.type, "__name__", repr(field.type))
            rows.append(f"| `{field.name}` | `{kind}` | {_default(field)} | "
                        f"{_cell(docs.get(field.name, ''))} |")
        parts.append("\n".join(rows))
    return "\n\n".join(parts) + "\n"


PAGES: dict[str, Callable[[], str]] = {HOME: home_page, CLI: cli_page, CONFIGS: configs_page}


def on_files(files, config):
    from mkdocs.structure.files import File

    if str(ROOT) not in sys.path:  # the package, when mkdocs runs outside its virtualenv
        sys.path.insert(0, str(ROOT))
    for path, render in PAGES.items():
        files.append(File.generated(config, path, content=render()))
    return files


def on_serve(server, config, builder):
    # `mkdocs serve` rebuilds on changes under docs/; the home page is README.md.
    server.watch(str(README))
    return server
