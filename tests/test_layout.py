"""The project's layout, read from the source with `ast` (nothing of the project is imported).

Every import statement of every module under `seed_agents/`, `builders/` and `launch/` is
read: at the top, inside functions and methods, and under `if TYPE_CHECKING:` alike. An
import names the module it loads (`from seed_agents.replay import unrolls` names
`seed_agents.replay.unrolls`; `from seed_agents.replay import make_dataset` names the
package `seed_agents.replay`). Dynamic imports (`importlib.import_module(name)`) are not
seen.

The floors, lowest first; a module may import its own floor and the floors below it,
never one above (`FLOORS`, where the longest matching prefix places a module):

  0. `seed_agents.utils` (and the package's own `seed_agents/__init__.py`)
  1. `seed_agents.specs`, `seed_agents.core`: the interfaces
  2. `seed_agents.envs`, `seed_agents.replay`
  3. `seed_agents.inference`, `seed_agents.datasets`, `seed_agents.actors`,
     `seed_agents.environment_loop`
  4. the kit, rooms named for what they hold: `seed_agents.networks`,
     `seed_agents.policies`, `seed_agents.losses`, `seed_agents.learning`,
     `seed_agents.configs` (what agents are composed of)
  5. `seed_agents.agents.<agent>`: vtrace, r2d2, sac, d4pg, td3, mpo, bc, cql, iql
  6. `builders`
  7. `launch`: the deployment core (experiment, program, nodes, limiter, control, the
     run's record, restore)
  8. `launch.backends`: inprocess, local_mp, ray, offline; `launch.studies`: sweeps of
     runs, searches over settings, runs read as results, their comparison
  9. `launch.commands`: the command line and the commands after training

They follow the design's layers (the parts, the recipes, deployment) and the imports as
they stand (issue 23): utils, specs and core import nothing of the project outside
themselves (utils, the lowest, is the one every part may use); envs and replay import
neither inference nor datasets, which import them; nothing below the agents imports an
agent, nothing below the builders a builder, nothing in the core of `launch` a backend
or a command.

Also: no import cycle between modules; no agent package imports another agent's package
(what two agents share lives in the kit's rooms); `seed_agents/agents/` holds the agent
packages only; no folder under `launch/` holds more than 8 modules.
"""

from __future__ import annotations

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]
PACKAGES = ("seed_agents", "builders", "launch")

FLOORS: tuple[tuple[str, ...], ...] = (
    ("seed_agents.utils",),
    ("seed_agents.specs", "seed_agents.core"),
    ("seed_agents.envs", "seed_agents.replay"),
    ("seed_agents.inference", "seed_agents.datasets", "seed_agents.actors",
     "seed_agents.environment_loop"),
    ("seed_agents.networks", "seed_agents.policies", "seed_agents.losses",
     "seed_agents.learning", "seed_agents.configs"),
    ("seed_agents.agents",),  # every agent package, and the agents' own __init__
    ("builders",),
    ("launch",),
    ("launch.backends", "launch.studies"),
    ("launch.commands",),
)
"""Module prefixes by floor, lowest first (see the module's docstring)."""

ROOT_PACKAGE_FLOOR = {"seed_agents": 0}
"""`seed_agents/__init__.py` alone, not a prefix: a new `seed_agents.x` needs a floor."""

AGENTS = "seed_agents.agents"
KIT_ROOMS = FLOORS[4]
MAX_LAUNCH_MODULES = 8


def _modules() -> dict[str, tuple[Path, bool]]:
    """Dotted module name -> (file, is a package's __init__)."""
    modules = {}
    for package in PACKAGES:
        for path in sorted((ROOT / package).rglob("*.py")):
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            is_package = parts[-1] == "__init__"
            if is_package:
                parts.pop()
            modules[".".join(parts)] = (path, is_package)
    return modules


MODULES = _modules()


def _known(name: str) -> str | None:
    """The longest prefix of `name` that is one of the project's modules."""
    parts = name.split(".")
    while parts and ".".join(parts) not in MODULES:
        parts.pop()
    return ".".join(parts) or None


def _imported(module: str, is_package: bool, node: ast.Import | ast.ImportFrom) -> set[str]:
    """The project's modules that one import statement of `module` loads."""
    if isinstance(node, ast.Import):
        return {known for alias in node.names if (known := _known(alias.name))}
    if node.level:  # relative: from its package (or above)
        base = module.split(".") if is_package else module.split(".")[:-1]
        base = base[:len(base) - (node.level - 1)]
        source = ".".join(base + ([node.module] if node.module else []))
    else:
        source = node.module or ""
    found = set()
    for alias in node.names:
        submodule = f"{source}.{alias.name}"
        known = submodule if submodule in MODULES else _known(source)
        if known:
            found.add(known)
    return found


def _import_graph() -> dict[str, dict[str, int]]:
    """Module -> {module it imports: line of the first such import}."""
    graph: dict[str, dict[str, int]] = {}
    for module, (path, is_package) in MODULES.items():
        edges: dict[str, int] = {}
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"), str(path))):
            if isinstance(node, ast.Import | ast.ImportFrom):
                for target in _imported(module, is_package, node):
                    if target != module:
                        edges.setdefault(target, node.lineno)
        graph[module] = edges
    return graph


GRAPH = _import_graph()


def _where(module: str, line: int) -> str:
    return f"{MODULES[module][0].relative_to(ROOT)}:{line}"


def _floor(module: str) -> int | None:
    if module in ROOT_PACKAGE_FLOOR:
        return ROOT_PACKAGE_FLOOR[module]
    best: tuple[int, int] | None = None  # (prefix length, floor)
    for floor, prefixes in enumerate(FLOORS):
        for prefix in prefixes:
            if module == prefix or module.startswith(prefix + "."):
                if best is None or len(prefix) > best[0]:
                    best = (len(prefix), floor)
    return None if best is None else best[1]


AGENT_PACKAGES = sorted(
    p.parent.name for p in (ROOT / "seed_agents" / "agents").glob("*/__init__.py"))
"""The agent packages: every package in `seed_agents/agents/`."""


def _agent_package(module: str) -> str | None:
    """`seed_agents.agents.<agent>` for a module of an agent package, else None."""
    parts = module.split(".")
    if len(parts) > 2 and module.startswith(AGENTS + ".") and parts[2] in AGENT_PACKAGES:
        return ".".join(parts[:3])
    return None


def test_the_modules_are_found():
    # A guard against a test that passes because it read nothing.
    assert "seed_agents.core" in MODULES and "launch.experiment" in MODULES
    assert GRAPH["launch.nodes"], "no imports read"
    assert {"vtrace", "r2d2", "sac", "d4pg", "td3", "mpo", "bc", "cql",
            "iql"} <= set(AGENT_PACKAGES)


def test_every_module_has_a_floor():
    missing = sorted(module for module in MODULES if _floor(module) is None)
    assert not missing, f"modules without a floor (add them to FLOORS): {missing}"


def test_no_module_imports_a_floor_above_its_own():
    upward = []
    for module, edges in GRAPH.items():
        for target, line in edges.items():
            if (_floor(target) or 0) > (_floor(module) or 0):
                upward.append(f"{_where(module, line)}: {module} (floor {_floor(module)}) "
                              f"imports {target} (floor {_floor(target)})")
    assert not upward, "upward imports:\n" + "\n".join(sorted(upward))


def _cycles() -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan, iterative)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components = []
    for start in sorted(GRAPH):
        if start in index:
            continue
        work = [(start, iter(sorted(GRAPH[start])))]
        index[start] = low[start] = len(index)
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = len(index)
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(GRAPH[child]))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                parent = work[-1][0]
                low[parent] = min(low[parent], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))
    return components


def test_no_import_cycle():
    lines = []
    for component in _cycles():
        members = set(component)
        lines.append(" <-> ".join(component) + ": " + "; ".join(
            f"{_where(module, line)} imports {target}"
            for module in component
            for target, line in sorted(GRAPH[module].items()) if target in members))
    assert not lines, "import cycles:\n" + "\n".join(lines)


def test_no_agent_imports_another_agents_package():
    crossing = []
    for module, edges in GRAPH.items():
        own = _agent_package(module)
        if own is None:
            continue
        for target, line in edges.items():
            other = _agent_package(target)
            if other is not None and other != own:
                crossing.append(f"{_where(module, line)}: {module} imports {target}")
    assert not crossing, ("agent packages importing another agent's (move what they share "
                          "to the kit: seed_agents.networks, policies, losses, learning, "
                          "configs):\n" + "\n".join(sorted(crossing)))


def test_agents_folder_holds_agent_packages_only():
    folder = ROOT / "seed_agents" / "agents"
    loose = sorted(p.name for p in folder.glob("*.py") if p.name != "__init__.py")
    assert not loose, f"modules beside the agent packages (they belong in the kit): {loose}"
    packages = sorted(p.name for p in folder.iterdir()
                      if p.is_dir() and p.name != "__pycache__")
    assert packages == sorted(AGENT_PACKAGES), packages
    assert not (folder / "common").exists(), "common/ became the kit's rooms"


def test_kit_rooms_say_what_they_hold():
    # Each room's package says when to use which piece, and exports its public names.
    for room in KIT_ROOMS:
        init = ROOT / Path(*room.split(".")) / "__init__.py"
        tree = ast.parse(init.read_text())
        doc = ast.get_docstring(tree)
        assert doc and len(doc.split()) >= 30, f"{room} needs a docstring saying when to use it"
        exported = next((node.value for node in tree.body if isinstance(node, ast.Assign)
                         and any(getattr(t, "id", None) == "__all__" for t in node.targets)),
                        None)
        assert exported is not None and exported.elts, f"{room} lists no public names"


def test_launch_folders_stay_small():
    folders = [ROOT / "launch", *(p for p in (ROOT / "launch").rglob("*")
                                  if p.is_dir() and p.name != "__pycache__")]
    crowded = []
    for folder in sorted(folders):
        modules = sorted(p.name for p in folder.glob("*.py"))
        if len(modules) > MAX_LAUNCH_MODULES:
            crowded.append(f"{folder.relative_to(ROOT)}: {len(modules)} modules {modules}")
    assert not crowded, (f"folders under launch/ with more than {MAX_LAUNCH_MODULES} modules "
                         "(__init__ included):\n" + "\n".join(crowded))
