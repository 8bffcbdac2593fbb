"""The layout keeps its shape: every module of workflows/ and durableconsole/
sits in a layer, and a module may import only modules of its own layer or
of a lower one (a lower number). Within a layer, no module imports another
that (directly or not) imports it back.

Every module is parsed, not imported, and every import statement counts,
those inside functions too: a lazy import hides a cycle from Python, not
from a reader.

`LAYERS` names each package and top-level module with its layer; a module
takes the layer of the longest name in it that is its own or a package
holding it (`workflows.webhooks.models` is listed apart from the rest of
`workflows.webhooks`). A new module in no layer fails the test: place it.
A few rules say more than the order can:

- durableconsole.proof, .client and .mcp are what agents and receivers
  install: they import nothing of workflows and run without Django;
- of durableconsole, workflows imports only the proof verifier;
- the ticket desk (the demo's external system) imports nothing of the
  project but the proof verifier;
- the engine and webhooks never import each other: the engine writes events
  into the outbox below both, and webhooks sends what the outbox holds;
- the settings import nothing that needs the app registry (a models module).

And no source file under workflows/ or durableconsole/ (migrations aside)
grows past `MAX_LINES`.
"""

import ast
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]
PACKAGES = ("workflows", "durableconsole")

LAYERS = {
    # 0. The floor: imports nothing of the project (the packages' own
    # __init__ modules hold only their docstrings).
    "workflows": 0,
    "durableconsole": 0,
    "workflows.errors": 0,
    "workflows.states": 0,
    "workflows.roles": 0,
    "workflows.env": 0,
    "workflows.db": 0,
    "workflows.ages": 0,
    "workflows.webhooks.addresses": 0,
    "durableconsole.proof": 0,
    "durableconsole.client": 0,
    "durableconsole.mcp": 0,
    "workflows.ticketdesk": 0,
    # 1. Teams over the roles.
    "workflows.teams": 1,
    # 2. The tables.
    "workflows.models": 2,
    "workflows.webhooks.models": 2,
    # 3. People over the tables; the audit trail, keys, signing, redaction,
    # archives; the reason validator (it refuses credentials with redaction).
    "workflows.persons": 3,
    "workflows.audit": 3,
    "workflows.reasons": 3,
    # 4. Tracing, and the task queue (its wake-ups carry the trace).
    "workflows.telemetry": 4,
    "workflows.queue": 4,
    # 5. The outbox: events written with the change they report.
    "workflows.outbox": 5,
    # Chat messages marked with the changes they show (the sending is above).
    "workflows.chat.marks": 5,
    # 6. Webhooks: endpoints, their keys, sending the outbox's rows.
    "workflows.webhooks": 6,
    # 7. The effects' interface and the registered actions.
    "workflows.actions": 7,
    # 8. The engine, and the API's shape of a workflow (it reads the gates).
    "workflows.engine": 8,
    "workflows.policy": 8,
    "workflows.shapes": 8,
    # 9. What people do, and the analytics of what they decided.
    "workflows.operations": 9,
    # Chat: what a Slack message shows, its buttons, sending it (tasks only).
    "workflows.chat": 9,
    # 10. Entry points: the queue's tasks, the console, the JSON API, the
    # templates' tags, the admin.
    "workflows.tasks": 10,
    "workflows.web": 10,
    "workflows.api": 10,
    "workflows.templatetags": 10,
    "workflows.admin": 10,
    # 11. Operating tools: bench, chaos soak, demo, seeding, processes.
    "workflows.ops": 11,
    # 12. What wires it all: the commands, the app's start-up, the settings
    # and the blocks of them kept apart (they check keys and policies with
    # the parsers of the parts that use them, and import no models: below),
    # the URLs and the servers' entry points.
    "workflows.management": 12,
    "workflows.apps": 12,
    "durableconsole.settings": 12,
    "durableconsole.settings_telemetry": 12,
    "durableconsole.settings_webhooks": 12,
    "durableconsole.settings_chat": 12,
    "durableconsole.settings_database": 12,
    "durableconsole.urls": 12,
    "durableconsole.wsgi": 12,
    "durableconsole.asgi": 12,
}
# The packages' own __init__ modules: listed for themselves, they hold no
# module below them (the parts of the tree are listed each).
ROOTS = set(PACKAGES)

# Installed apart from the console (agents, receivers of proofs).
STANDALONE = {"durableconsole.proof", "durableconsole.client", "durableconsole.mcp"}
# What of durableconsole workflows may import, and what the desk may import.
WORKFLOWS_MAY_IMPORT_FROM_DURABLECONSOLE = {"durableconsole.proof"}
DESK = "workflows.ticketdesk"
DESK_MAY_IMPORT = {"durableconsole.proof"}
# Parts that never import each other, either way.
APART = {("workflows.engine", "workflows.webhooks")}
SETTINGS = "durableconsole.settings"
MODELS_MODULES = ("workflows.models", "workflows.webhooks.models")

MAX_LINES = 600
# The line limit holds for the tests as for the code they test.
LINE_LIMITED = (*PACKAGES, "tests")
# Over MAX_LINES still, each being split on its own branch; an entry goes
# when its split merges (and fails here once the file is split or gone).
NOT_YET_SPLIT: set[str] = set()


def module_names() -> dict[str, Path]:
    modules = {}
    for package in PACKAGES:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" in path.parts:
                continue
            parts = list(path.relative_to(ROOT).with_suffix("").parts)
            if parts[-1] == "__init__":
                parts.pop()
            modules[".".join(parts)] = path
    return modules


def imports_of(name: str, path: Path, modules: dict[str, Path]) -> set[str]:
    """The project's modules that `name` imports, anywhere in its body."""
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
            if target and target != name and target not in ROOTS:
                found.add(target)
    return found


def third_party_imports(path: Path) -> set[str]:
    """The top-level names of every absolute import in a file."""
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and not node.level and node.module:
            found.add(node.module.split(".")[0])
    return found


def graph() -> dict[str, set[str]]:
    modules = module_names()
    return {name: imports_of(name, path, modules) for name, path in modules.items()}


def part(module: str) -> str | None:
    """The name in LAYERS that places `module`, None when none does."""
    candidates = [name for name in LAYERS if module == name or (module.startswith(name + ".") and name not in ROOTS)]
    return max(candidates, key=len, default=None)


def within(module: str, name: str) -> bool:
    return module == name or module.startswith(name + ".")


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
    """Each import of a module from a higher layer than the importer's (a
    module in no layer is reported by its own test)."""
    layer = {module: LAYERS.get(part(module)) for module in set(edges) | set().union(*edges.values())}
    wrong = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if None not in (layer[module], layer[target]) and layer[target] > layer[module]:
                wrong.append(f"{module} (layer {layer[module]}) imports {target} (layer {layer[target]})")
    return wrong


def crossings(edges: dict[str, set[str]]) -> list[str]:
    """Each import the rules beside the layers forbid."""
    wrong = []
    for module, targets in sorted(edges.items()):
        for target in sorted(targets):
            if module in STANDALONE and target not in STANDALONE:
                wrong.append(f"{module} is installed apart, yet imports {target}")
            if (
                within(module, "workflows")
                and within(target, "durableconsole")
                and target not in WORKFLOWS_MAY_IMPORT_FROM_DURABLECONSOLE
            ):
                wrong.append(f"{module} imports {target}: of durableconsole, workflows imports only the proof")
            if within(module, DESK) and not within(target, DESK) and target not in DESK_MAY_IMPORT:
                wrong.append(f"{module} imports {target}: the desk stands for an external system")
            for one, other in APART:
                if (within(module, one) and within(target, other)) or (within(module, other) and within(target, one)):
                    wrong.append(f"{module} imports {target}: {one} and {other} meet only below both")
    return wrong


def reachable(edges: dict[str, set[str]], start: str) -> set[str]:
    seen, todo = set(), [start]
    while todo:
        for target in edges.get(todo.pop(), ()):
            if target not in seen:
                seen.add(target)
                todo.append(target)
    return seen


def test_the_walk_sees_every_module_and_its_lazy_imports():
    edges = graph()
    assert "workflows.engine.execution" in edges and "workflows.management.commands.bench" in edges
    assert "durableconsole.settings" in edges and "durableconsole.mcp" in edges
    # policy imports the audit trail inside a function.
    assert "workflows.audit.journal" in edges["workflows.engine.policy"]
    # telemetry imports redaction inside a function; settings read the environment.
    assert "workflows.audit.redaction" in edges["workflows.telemetry"]
    assert "workflows.env" in edges["durableconsole.settings"]


def test_every_module_has_a_layer():
    assert sorted(name for name in module_names() if part(name) is None) == []


def test_every_layer_entry_names_a_module_or_one_on_its_way():
    # Planned parts may be listed before they exist (workflows.api and
    # workflows.db are being made on their own branches); every other entry
    # names a module of the tree, so that a removed one leaves no stale line.
    planned = {"workflows.api", "workflows.db"}
    modules = module_names()
    assert sorted(name for name in LAYERS if name not in modules and name not in planned) == []


def test_no_import_cycles():
    assert cycles(graph()) == []


def test_dependencies_point_one_way():
    assert upward(graph()) == []


def test_the_rules_beside_the_layers_hold():
    assert crossings(graph()) == []


def test_the_settings_import_no_models():
    assert sorted(reachable(graph(), SETTINGS) & set(MODELS_MODULES)) == []


def test_the_standalone_modules_import_neither_django_nor_the_console():
    for name in sorted(STANDALONE):
        path = module_names()[name]
        assert {"django", "workflows"} & third_party_imports(path) == set(), name
    # And, imported, they pull in no Django.
    code = (
        "import sys\n"
        "import durableconsole.proof, durableconsole.client, durableconsole.mcp\n"
        "loaded = sorted(m for m in sys.modules if m == 'django' or m.startswith(('django.', 'workflows')))\n"
        "assert not loaded, loaded\n"
    )
    subprocess.run([sys.executable, "-c", code], cwd=ROOT, check=True, env={"PYTHONPATH": str(ROOT)})


def test_the_checks_catch_a_cycle_an_upward_import_and_a_crossing():
    assert cycles({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == [["a", "b", "c"]]
    assert upward(
        {
            "workflows.engine.outcomes": {"workflows.operations.deadletters", "workflows.outbox"},
            "workflows.web.views": {"workflows.ops.bench"},
            "workflows.operations.plans": {"workflows.engine.transitions"},
            "workflows.models": {"workflows.webhooks.models", "workflows.webhooks.delivery"},
        }
    ) == [
        "workflows.engine.outcomes (layer 8) imports workflows.operations.deadletters (layer 9)",
        "workflows.models (layer 2) imports workflows.webhooks.delivery (layer 6)",
        "workflows.web.views (layer 10) imports workflows.ops.bench (layer 11)",
    ]
    assert crossings(
        {
            "durableconsole.proof": {"workflows.errors"},
            "workflows.engine.execution": {"durableconsole.client", "durableconsole.proof"},
            "workflows.ticketdesk.server": {"workflows.states", "durableconsole.proof"},
            "workflows.engine.worker": {"workflows.webhooks.delivery"},
        }
    ) == [
        "durableconsole.proof is installed apart, yet imports workflows.errors",
        "workflows.engine.execution imports durableconsole.client: of durableconsole, workflows imports only the proof",
        "workflows.engine.worker imports workflows.webhooks.delivery: "
        "workflows.engine and workflows.webhooks meet only below both",
        "workflows.ticketdesk.server imports workflows.states: the desk stands for an external system",
    ]
    assert part("workflows.brand_new") is None and part("workflows") == "workflows"
    assert part("workflows.webhooks.models") == "workflows.webhooks.models"
    assert part("workflows.webhooks.delivery") == "workflows.webhooks"


def line_counts() -> dict[str, int]:
    counts = {}
    for package in LINE_LIMITED:
        for path in (ROOT / package).rglob("*.py"):
            if "migrations" not in path.parts:
                counts[path.relative_to(ROOT).as_posix()] = len(path.read_text().splitlines())
    return counts


def test_no_source_file_is_over_the_line_limit():
    counts = line_counts()
    assert sorted(f"{path}: {n}" for path, n in counts.items() if n > MAX_LINES and path not in NOT_YET_SPLIT) == []
    # An entry goes once its file is split: a stale one fails.
    assert sorted(path for path in NOT_YET_SPLIT if counts.get(path, 0) <= MAX_LINES) == []
