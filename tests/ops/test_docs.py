"""The documentation keeps up with the code: every `docs/<page>.md#<anchor>`
that code, tests or templates cite exists; no citation of the old design
document is left; every setting and every audit event kind is documented;
the generated reference pages are current.

The checks parse files rather than import them, so they see every call
site, those inside functions too. Each check is a function of the files it
reads, and a test next to it feeds it a planted mistake, so that each can
be seen to fail.
"""

import ast
import re
from pathlib import Path

import pytest
from django.core.management import CommandError, call_command
from markdown.extensions.toc import slugify

from workflows import env
from workflows.audit.kinds import KINDS
from workflows.engine import retry  # noqa: F401  (reads the RETRY_* settings: they join the catalog)

pytestmark = pytest.mark.once  # files read, whatever the database

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
CITING = [ROOT / "workflows", ROOT / "durableconsole", ROOT / "tests", ROOT / "templates"]
# Written so that this file does not cite a page itself.
CITATION = re.compile(r"\bdocs/([\w/.-]+?\.md)(?:#([\w-]+))?")
OLD_CITATION = re.compile("DESIGN(?:\\.md)?\\s*\u00a7|\u00a7\\s*\\d")
HEADING = re.compile(r"^(#{1,6})\s+(.*?)\s*(?:\{#([\w-]+)[^}]*\})?\s*#*\s*$")


def cited_files(roots: list[Path]) -> list[Path]:
    """Code, tests and templates; not this file, whose planted mistakes are examples."""
    return sorted(
        path
        for root in roots
        for path in root.rglob("*")
        if path.suffix in (".py", ".html", ".txt") and path.is_file() and path != Path(__file__).resolve()
    )


def anchors(page: Path) -> set[str]:
    """The ids mkdocs gives the headings of a page: an explicit `{#id}`, or
    the slug of the heading's text (fenced code is not headings)."""
    found, fenced = set(), False
    for line in page.read_text().splitlines():
        if line.lstrip().startswith("```"):
            fenced = not fenced
            continue
        match = None if fenced else HEADING.match(line)
        if match:
            text = re.sub(r"[`*_]|\[([^\]]*)\]\([^)]*\)", r"\1", match.group(2))
            found.add(match.group(3) or slugify(text, "-"))
    return found


def broken_citations(files: list[Path], docs: Path) -> list[str]:
    problems, known = [], {}
    for path in files:
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1):
            for page, anchor in CITATION.findall(line):
                target = docs / page
                where = f"{path.relative_to(path.parents[1])}:{number}"
                if not target.is_file():
                    problems.append(f"{where}: no page docs/{page}")
                    continue
                if target not in known:
                    known[target] = anchors(target)
                if anchor and anchor not in known[target]:
                    problems.append(f"{where}: no heading #{anchor} in docs/{page}")
    return problems


def old_citations(files: list[Path]) -> list[str]:
    return [
        f"{path.name}:{number}: {line.strip()}"
        for path in files
        for number, line in enumerate(path.read_text(errors="replace").splitlines(), start=1)
        if OLD_CITATION.search(line)
    ]


def _calls(tree: ast.AST):
    return (node for node in ast.walk(tree) if isinstance(node, ast.Call))


def _name(call: ast.Call) -> str:
    return call.func.attr if isinstance(call.func, ast.Attribute) else getattr(call.func, "id", "")


def environment_reads(files: list[Path]) -> set[str]:
    """Names of environment variables read through the helpers or os.environ."""
    names = set()
    for path in files:
        if path.suffix != ".py":
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            literal = None
            if isinstance(node, ast.Call) and node.args and isinstance(node.args[0], ast.Constant):
                func = node.func
                on_environ = isinstance(func, ast.Attribute) and ast.unparse(func.value) == "os.environ"
                if (_name(node).startswith("env_") and not on_environ) or (on_environ and func.attr == "get"):
                    literal = node.args[0].value
                elif _name(node) == "getenv":
                    literal = node.args[0].value
            elif (
                isinstance(node, ast.Subscript)
                and isinstance(node.ctx, ast.Load)
                and ast.unparse(node.value) == "os.environ"
                and isinstance(node.slice, ast.Constant)
            ):
                literal = node.slice.value
            if isinstance(literal, str):
                names.add(literal)
    return names


def _constants(files: list[Path]) -> dict[str, set[str]]:
    """Module-level `NAME = "text"` assignments, by name, across the files."""
    found: dict[str, set[str]] = {}
    for path in files:
        for node in ast.parse(path.read_text(), str(path)).body:
            if isinstance(node, ast.Assign) and isinstance(node.value, ast.Constant):
                for target in node.targets:
                    if isinstance(target, ast.Name) and isinstance(node.value.value, str):
                        found.setdefault(target.id, set()).add(node.value.value)
    return found


def audit_kinds_written(files: list[Path]) -> tuple[set[str], set[str]]:
    """The kinds code names as an event's verb (`verb=...`, or the second
    argument of `journal.Entry`), and the literal prefixes of kinds built
    with an f-string (`f"job.{kind}"`)."""
    files = [path for path in files if path.suffix == ".py"]
    constants, kinds, prefixes = _constants(files), set(), set()
    for path in files:
        for call in _calls(ast.parse(path.read_text(), str(path))):
            values = [keyword.value for keyword in call.keywords if keyword.arg == "verb"]
            if _name(call) == "Entry" and len(call.args) > 1:
                values.append(call.args[1])
            for value in values:
                if isinstance(value, ast.Constant) and isinstance(value.value, str):
                    kinds.add(value.value)
                elif isinstance(value, ast.Name) and value.id.isupper():
                    kinds |= constants.get(value.id, set())
                elif isinstance(value, ast.JoinedStr) and isinstance(value.values[0], ast.Constant):
                    prefixes.add(value.values[0].value)
    return kinds, prefixes


def documented(page: Path, names) -> list[str]:
    text = page.read_text()
    return sorted(name for name in names if f"`{name}`" not in text)


# --- the checks -------------------------------------------------------------------------------------------------


def test_every_cited_page_and_anchor_exists():
    assert broken_citations(cited_files(CITING), DOCS) == []


def test_no_citation_of_the_old_design_document_is_left():
    assert old_citations(cited_files(CITING)) == []


def test_every_setting_read_is_in_the_catalog_with_a_meaning():
    files = cited_files([ROOT / "workflows", ROOT / "durableconsole"])
    assert sorted(environment_reads(files) - set(env.CATALOG)) == []
    assert [name for name, setting in env.CATALOG.items() if not setting.help] == []


def test_every_setting_in_the_catalog_is_in_the_settings_reference():
    assert documented(DOCS / "reference" / "settings.md", env.CATALOG) == []


def test_every_audit_kind_written_is_in_the_catalog_and_the_reference():
    kinds, prefixes = audit_kinds_written(cited_files([ROOT / "workflows", ROOT / "durableconsole"]))
    assert len(kinds) > 50  # the scan finds the call sites
    assert sorted(kinds - set(KINDS)) == []
    assert sorted(prefix for prefix in prefixes if not any(kind.startswith(prefix) for kind in KINDS)) == []
    assert documented(DOCS / "reference" / "audit-events.md", KINDS) == []


def test_the_generated_reference_is_current():
    call_command("docs_reference", "--check")


# --- each check can fail ----------------------------------------------------------------------------------------


def test_a_citation_of_a_missing_anchor_or_page_is_caught(tmp_path):
    (tmp_path / "docs").mkdir()
    (tmp_path / "docs" / "page.md").write_text("# Title {#title}\n\n## A heading\n\n```\n# not a heading\n```\n")
    code = tmp_path / "src" / "module.py"
    code.parent.mkdir()
    code.write_text(
        "# docs/page.md#title docs/page.md#a-heading\n# docs/page.md#not-a-heading\n# docs/missing.md#title\n"
    )
    problems = broken_citations([code], tmp_path / "docs")
    assert [problem.split(": ", 1)[1] for problem in problems] == [
        "no heading #not-a-heading in docs/page.md",
        "no page docs/missing.md",
    ]


def test_an_old_design_citation_is_caught(tmp_path):
    code = tmp_path / "module.py"
    code.write_text("# fine\n# see DESIGN \u00a712\n# (\u00a718.3)\n")
    assert len(old_citations([code])) == 2


def test_an_undocumented_setting_or_audit_kind_is_caught(tmp_path):
    code = tmp_path / "module.py"
    code.write_text(
        "import os\n"
        "A = env_int('PLANTED_SETTING', 1)\n"
        "B = os.environ.get('PLANTED_RAW')\n"
        "PLANTED = 'planted.constant'\n"
        "def f():\n"
        "    journal.append(actor=None, verb='planted.kind', obj_type='x', obj_id=1)\n"
        "    journal.Entry(None, PLANTED, 'x', 1, None, {})\n"
        "    move(x, 'S', verb=f'planted.{x}')\n"
    )
    assert {"PLANTED_SETTING", "PLANTED_RAW"} <= environment_reads([code]) - set(env.CATALOG)
    kinds, prefixes = audit_kinds_written([code])
    assert kinds == {"planted.kind", "planted.constant"} and prefixes == {"planted."}
    page = tmp_path / "page.md"
    page.write_text("| `planted.kind` | documented |\n")
    assert documented(page, kinds) == ["planted.constant"]


def test_a_stale_reference_page_is_caught(settings, tmp_path):
    (tmp_path / "docs" / "reference").mkdir(parents=True)
    settings.BASE_DIR = tmp_path
    with pytest.raises(CommandError, match="stale: docs/reference/http-api.md"):
        call_command("docs_reference", "--check")
