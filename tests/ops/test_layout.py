"""The layout keeps its shape: dependencies point one way, and no module
imports another that (directly or not) imports it back.

Every module under workflows/ is parsed, not imported, and every import
statement counts, those inside functions too: a lazy import hides a cycle
from Python, not from a reader. Layers, from the top: ops (bench, chaos)
and the management commands; web (console, API); operations; engine;
actions and audit; then the floor (models, states, roles, errors).
"""

import ast
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGE = ROOT / "workflows"

# What each part of the tree may not import. A module's part is the first
# component after `workflows.` (`engine`, `operations`, ...), or the module
# itself for the top-level ones.
FLOOR = {"models", "states", "roles", "errors", "persons"}
FORBIDDEN = {
    "engine": {"operations", "web", "ops", "management", "tasks"},
    "operations": {"web", "ops", "management", "tasks"},
    "audit": {"engine", "operations", "web", "ops", "actions", "management", "tasks"},
    "actions": {"engine", "operations", "web", "ops", "management", "tasks"},
    "ticketdesk": {"engine", "operations", "web", "ops", "audit", "actions", "management", "tasks", *FLOOR},
    **{name: {"engine", "operations", "web", "ops", "audit", "actions", "management", "tasks"} for name in FLOOR},
}
# Only these may import the ops tooling.
MAY_IMPORT_OPS = {"ops", "management"}


def module_names() -> dict[str, Path]:
    modules = {}
    for path in PACKAGE.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        parts = list(path.relative_to(ROOT).with_suffix("").parts)
        if parts[-1] == "__init__":
            parts.pop()
        modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The workflows modules that `name` imports, anywhere in its body."""
    found = set()
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            targets = [alias.name for alias in node.names]
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            # `from workflows.engine import leases` imports the module leases.
            targets = [f"{base}.{alias.name}" if f"{base}.{alias.name}" in modules else base for alias in node.names]
        else:
            continue
        for target in targets:
            while target and target not in modules:
                target = target.rpartition(".")[0]
            if target and target != name and target != "workflows":
                found.add(target)
    return found


def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def part(module: str) -> str:
    return module.split(".")[1] if module.count(".") else module


def cycles(edges: dict[str, set[str]]) -> list[list[str]]:
    """Each strongly connected group of more than one module (Tarjan)."""
    index, low, stack, on_stack, groups = {}, {}, [], set(), []

    def visit(node):
        index[node] = low[node] = len(index)
        stack.append(node)
        on_stack.add(node)
        for nxt in edges.get(node, ()):
            if nxt not in index:
                visit(nxt)
                low[node] = min(low[node], low[nxt])
            elif nxt in on_stack:
                low[node] = min(low[node], index[nxt])
        if low[node] == index[node]:
            group = []
            while True:
                top = stack.pop()
                on_stack.discard(top)
                group.append(top)
                if top == node:
                    break
            if len(group) > 1:
                groups.append(sorted(group))

    for node in sorted(edges):
        if node not in index:
            visit(node)
    return groups


def upward(edges: dict[str, set[str]]) -> list[str]:
    wrong = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if part(target) in FORBIDDEN.get(part(module), ()) or (
                part(target) == "ops" and part(module) not in MAY_IMPORT_OPS
            ):
                wrong.append(f"{module} imports {target}")
    return wrong


def test_the_walk_sees_every_module_and_its_lazy_imports():
    edges = graph()
    assert "workflows.engine.execution" in edges and "workflows.management.commands.bench" in edges
    # policy imports the audit trail inside a function.
    assert "workflows.audit.journal" in edges["workflows.engine.policy"]


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_dependencies_point_one_way():
    assert upward(graph()) == []


def test_the_checks_catch_a_cycle_and_an_upward_import():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward(
        {
            "workflows.engine.outcomes": {"workflows.operations.deadletters"},
            "workflows.web.views": {"workflows.ops.bench"},
            "workflows.operations.plans": {"workflows.engine.transitions"},
        }
    ) == [
        "workflows.engine.outcomes imports workflows.operations.deadletters",
        "workflows.web.views imports workflows.ops.bench",
    ]
