"""The packages point one way: every import of every module (function-level ones included) follows
the rules of docs/architecture.md's table of rooms."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]

# module prefix -> prefixes it must not import
FORBIDDEN: dict[str, tuple[str, ...]] = {
    "store": ("service", "clients", "bench", "tests"),
    "store.kafka": ("store.table", "store.lifecycle"),
    "store.table": ("store.kafka", "store.lifecycle"),
    "clients": ("store", "service", "bench", "tests"),
    "wire": ("store", "service", "clients", "bench", "tests"),
    "service": ("bench", "tests"),
}


def module_name(path: Path) -> str:
    parts = path.relative_to(ROOT).with_suffix("").parts
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


def imported(source: str) -> set[str]:
    """Every module (and imported name) ``source`` imports, by its absolute name."""
    names: set[str] = set()
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.Import):
            names.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom) and node.module and node.level == 0:
            names.add(node.module)
            names.update(f"{node.module}.{alias.name}" for alias in node.names)
    return names


# The served side of ``service`` runs no Spark: only the local tools (and the commands that start
# them) import the Spark client and ``service.local``.
LOCAL_ONLY = ("service.local", "clients.spark")
LOCAL_USERS = ("service.local", "service.cli")


def within(name: str, prefix: str) -> bool:
    return name == prefix or name.startswith(prefix + ".")


def shared_leaf(name: str) -> bool:
    """A module at the top of ``store`` (its shared vocabulary), the package's ``__init__`` aside."""
    parts = name.split(".")
    return len(parts) == 2 and parts[0] == "store" and parts[1] not in ("kafka", "table", "lifecycle")


def modules() -> list[Path]:
    packages = ("store", "service", "clients", "wire")
    return sorted(path for package in packages for path in (ROOT / package).rglob("*.py"))


def breaches(name: str, source: str) -> list[str]:
    found = []
    for target in sorted(imported(source)):
        for owner, forbidden in FORBIDDEN.items():
            if within(name, owner) and any(within(target, no) for no in forbidden):
                found.append(f"{name} imports {target}")
        if within(name, "service") and not any(within(name, user) for user in LOCAL_USERS):
            found += [f"{name} imports {target}" for no in LOCAL_ONLY if within(target, no)]
        rooms = ("store.kafka", "store.table", "store.lifecycle")
        if shared_leaf(name) and any(within(target, room) for room in rooms):
            found.append(f"{name} (a shared leaf of store) imports {target}")
    return found


@pytest.mark.parametrize("path", modules(), ids=lambda path: str(path.relative_to(ROOT)))
def test_imports_follow_the_rooms(path: Path) -> None:
    assert breaches(module_name(path), path.read_text(encoding="utf-8")) == []


def test_the_check_sees_a_forbidden_import() -> None:
    source = "def f():\n    from store.kafka.batch import RecordBatch\n    import clients.spark\n"
    assert breaches("store.table.engine", source) == [
        "store.table.engine imports clients.spark",
        "store.table.engine imports store.kafka.batch",
        "store.table.engine imports store.kafka.batch.RecordBatch",
    ]
    assert breaches("store.position", "from store.table import Replica\n") == [
        "store.position (a shared leaf of store) imports store.table",
        "store.position (a shared leaf of store) imports store.table.Replica",
    ]
    assert breaches("store.lifecycle.store", "from store.table_format import table_options\n") == []
    assert breaches("service.routes", "from service.local.broker import LocalBroker\n") == [
        "service.routes imports service.local.broker",
        "service.routes imports service.local.broker.LocalBroker",
    ]
    assert breaches("service.cli", "from service.local.broker import LocalBroker\n") == []


def import_graph() -> dict[str, set[str]]:
    """Module -> the modules of ours it imports (a package's own ``__init__`` left aside)."""
    names = {module_name(path): path for path in modules()}
    graph: dict[str, set[str]] = {}
    for name, path in names.items():
        targets = imported(path.read_text(encoding="utf-8"))
        graph[name] = {t for t in targets if t in names and t != name and not within(name, t)}
    return graph


def cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected groups of more than one module (Tarjan's algorithm)."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    found: list[list[str]] = []

    def visit(node: str) -> None:
        index[node] = low[node] = len(index)
        stack.append(node)
        for target in graph[node]:
            if target not in index:
                visit(target)
                low[node] = min(low[node], low[target])
            elif target in stack:
                low[node] = min(low[node], index[target])
        if low[node] == index[node]:
            group = []
            while True:
                member = stack.pop()
                group.append(member)
                if member == node:
                    break
            if len(group) > 1:
                found.append(sorted(group))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return found


def test_no_modules_import_each_other() -> None:
    assert cycles(import_graph()) == []


def test_the_cycle_check_sees_a_cycle() -> None:
    graph = {"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}
    assert cycles(graph) == [["a", "b", "c"]]
