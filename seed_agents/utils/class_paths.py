"""A class's importable name, whatever started the process that defined it.

A run records its builder's class (run.json, every checkpoint) so that another process can
check a checkpoint against the run and rebuild the agent. `module.QualName` from
`cls.__module__` is not enough for a class defined in the script that was run: the driver
of `python dqn.py` calls its module `__main__`, a process started by multiprocessing's
spawn `__mp_main__`, and neither names anything another process can import.
`class_path` names such a class by the module its file is importable as (`dqn` when
`python dqn.py` put the script's folder on `sys.path`, `examples.dqn` under
`python -m examples.dqn`), the same in the driver and in every spawned child.

Two processes may still import one file under two names (`dqn` from inside examples/,
`examples.dqn` from the repository): `same_class_path` takes a dotted suffix as the same
class, and reads records made before this module, which say `__main__.Name`.
"""

from __future__ import annotations

import os
import sys

MAIN_MODULES = ("__main__", "__mp_main__")
"""What a script's module is called in the process that ran it, and in spawned children."""


def class_path(cls: type) -> str:
    """"module.QualName", with a script's module named as it is importable."""
    return f"{module_name(cls.__module__)}.{cls.__qualname__}"


def module_name(name: str) -> str:
    """`name` itself, unless it is a script's (`MAIN_MODULES`): then the name its file is
    importable as from `sys.path`, or `name` when there is none (code typed into a REPL)."""
    if name not in MAIN_MODULES:
        return name
    module = sys.modules.get(name)
    spec = getattr(module, "__spec__", None)
    if spec is not None and spec.name and spec.name not in MAIN_MODULES:
        return spec.name  # `python -m package.module`
    path = getattr(module, "__file__", None)
    if path is None:
        return name
    return _importable_name(os.path.abspath(path)) or name


def _importable_name(path: str) -> str | None:
    """The dotted name `path` (a .py file) imports as from the nearest `sys.path` folder."""
    stem, extension = os.path.splitext(path)
    if extension != ".py":
        return None
    best = None
    for entry in sys.path:
        folder = os.path.abspath(entry or os.curdir)
        relative = os.path.relpath(stem, folder)
        if relative.startswith(os.pardir):
            continue
        parts = relative.split(os.sep)
        if parts[-1] == "__init__":
            parts = parts[:-1]
        if parts and all(part.isidentifier() for part in parts):
            if best is None or len(parts) < len(best):
                best = parts
    return ".".join(best) if best else None


def same_class_path(recorded: str, found: str) -> bool:
    """Whether two class paths name one class: equal, one a dotted suffix of the other
    (`dqn.DQNBuilder`, `examples.dqn.DQNBuilder`), or a record from before scripts were
    named (`__main__.DQNBuilder`) and a class of that name."""
    if recorded == found:
        return True
    if recorded.endswith("." + found) or found.endswith("." + recorded):
        return True
    for main in MAIN_MODULES:
        for a, b in ((recorded, found), (found, recorded)):
            if a.startswith(main + ".") and b.endswith("." + a[len(main) + 1:]):
                return True
    return False
