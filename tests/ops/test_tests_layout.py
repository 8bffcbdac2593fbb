"""The tests keep their shape: each test module sits in the folder of its
wing, and what tests share lives in tests/support, never in a test module or
a conftest that another module imports. A test module that imports another
runs that module's fixtures and collection side effects twice and ties two
wings together; a helper in conftest hides where it comes from.

Every module under tests/ is parsed, not imported, and every import
statement counts, those inside functions too.
"""

import ast
from pathlib import Path

TESTS = Path(__file__).resolve().parents[1]

# The wings, mirroring the packages they test, and what each holds.
WINGS = {
    "engine": "execution, checkpoints, crashes, effects in flight, limits, retries, wake-ups, states",
    "operations": "decisions, gates, claims, cancellation, resolution, revisions, compensation, notices",
    "api": "the JSON API: submission, lists and cursors, waits, parity with the console, hostile input",
    "console": "the console's pages through Django's test client",
    "browser": "the console in the system Chromium",
    "audit": "the audit chain, its keys and console, archive, secrets kept out of it",
    "actions": "actions, plugins, previews, transport and outbound addresses, the ticket desk",
    "agents": "the Python client, the MCP server, webhooks",
    "identity": "SSO, persons, roles, teams, break-glass, sessions",
    "chat": "Slack: the stand-in, messages posted and updated, interactions",
    "ops": "bench, chaos, layout, settings and the demo, hardening, tracing and metrics, the docs",
}
SUPPORT = "support"


def python_files() -> list[Path]:
    # The plugin distributions are installed packages of their own, not test code.
    plugins = TESTS / SUPPORT / "plugins"
    return sorted(path for path in TESTS.rglob("*.py") if plugins not in path.parents)


def module_name(path: Path) -> str:
    parts = list(path.relative_to(TESTS.parent).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def imported(path: Path) -> set[str]:
    """Every module `path` imports, names taken from a package counted as modules."""
    name = module_name(path)
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    found = set()
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            found.update(alias.name for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = node.module or ""
            if node.level:
                anchor = package.split(".")[: len(package.split(".")) - (node.level - 1)]
                base = ".".join(anchor + ([base] if base else []))
            found.add(base)
            found.update(f"{base}.{alias.name}" for alias in node.names)
    return found


def is_test_or_conftest(module: str) -> bool:
    last = module.rpartition(".")[2]
    return module.startswith("tests.") and (last.startswith("test_") or last == "conftest")


def test_no_module_under_tests_imports_a_test_module_or_a_conftest():
    offenders = {
        str(path.relative_to(TESTS.parent)): sorted(filter(is_test_or_conftest, imported(path)))
        for path in python_files()
    }
    assert {path: names for path, names in offenders.items() if names} == {}, "move what they share into tests/support/"


def test_every_test_module_sits_in_a_wing():
    misplaced = [
        str(path.relative_to(TESTS.parent))
        for path in python_files()
        if path.name.startswith("test_") and path.relative_to(TESTS).parts[0] not in WINGS
    ]
    assert misplaced == [], f"test modules belong in one of tests/{{{','.join(WINGS)}}}/"


def test_the_folders_under_tests_are_the_wings_and_support_each_a_package():
    folders = {path.name for path in TESTS.iterdir() if path.is_dir() and not path.name.startswith((".", "__"))}
    assert folders == {*WINGS, SUPPORT}
    # Packages give every test module a dotted name of its own (tests.api.test_x),
    # so two wings may hold modules of the same name.
    assert [name for name in sorted(folders) if not (TESTS / name / "__init__.py").exists()] == []
