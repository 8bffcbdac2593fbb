"""Reviewers read arguments, not dictionaries (issue 17 item 3): the review
page and the inbox render each step's arguments from its action's schema,
with labels, long text folded, `$from` references as "result of step KEY"
(with the value they took once that step ran) and secrets as
`secret:NAME`; raw arguments anywhere are JSON, never Python's repr; all
of it escaped, since agents write it."""

import html
import re

import pytest
from pydantic import BaseModel, ConfigDict, Field

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows import actions, tasks
from workflows.audit import secrets
from workflows.operations import plans

SCRIPT = "<script>alert(1)</script>"
LONG = "Paper jam on every tray. " * 40


@pytest.fixture
def reviewer(client, people):
    assert client.login(username="reviewer", password=PASSWORD)
    return client


def page(client, path) -> str:
    answer = client.get(path)
    assert answer.status_code == 200
    return answer.content.decode()


def arguments_of(document: str, step_key: str) -> str:
    """The text of one step's arguments cell on the review page, tags removed."""
    row = re.search(rf'<tr data-testid="step-{re.escape(step_key)}">(.*?)</tr>', document, re.S).group(1)
    cell = re.search(r'<dl class="arguments".*?</dl>\s*(?=<details class="raw-args"|</td>)', row, re.S).group(0)
    return html.unescape(re.sub(r"\s+", " ", re.sub(r"<[^>]+>", " ", cell))).strip()


class CreateArgs(BaseModel):
    """A schema of the kind the built-ins declare: titled fields."""

    model_config = ConfigDict(extra="forbid")

    title: str = Field(title="Ticket title")
    body: str = Field("", title="What happened", description="Shown to the desk's staff")


def test_fields_are_labelled_from_the_actions_schema(people, reviewer, monkeypatch):
    monkeypatch.setattr(type(actions.get("ticket.create")), "Args", CreateArgs)
    workflow = plans.submit(people["agent"], ticket_plan()).workflow

    document = page(reviewer, f"/workflows/{workflow.pk}/")

    assert arguments_of(document, "open") == "Ticket title Printer on fire What happened Floor 3"
    assert 'title="Shown to the desk&#x27;s staff">What happened</dt>' in document
    # No title given: the names, made readable, in the schema's order.
    assert arguments_of(document, "note") == "Ticket id result of step open · id Body Extinguisher on its way"


def test_references_show_as_the_result_of_a_step_and_secrets_by_name(people, reviewer, settings):
    settings.SECRETS_POLICY = {
        "DESK_TOKEN": {"actions": ["ticket.create", "noop"], "hosts": [secrets.host_of(settings.TICKET_DESK_URL)]}
    }
    plan = ticket_plan()
    plan["steps"][0]["args"]["body"] = {"$secret": "DESK_TOKEN"}
    plan["steps"].append(
        {
            "key": "echo",
            "action": "noop",
            "args": {
                "nested": {"ticket": {"$from": "open.result.id"}, "key": {"$secret": "DESK_TOKEN"}},
                "list": [1, True, None, "two"],
            },
        }
    )
    workflow = plans.submit(people["agent"], plan).workflow

    for document in (page(reviewer, f"/workflows/{workflow.pk}/"), page(reviewer, "/")):
        assert "secret:DESK_TOKEN" in document and "$secret" not in document
        assert 'data-testid="from-ref">result of step <code>open</code> · <code>id</code></span>' in document
    document = page(reviewer, f"/workflows/{workflow.pk}/")
    assert arguments_of(document, "open") == "Title Printer on fire Body secret:DESK_TOKEN"
    assert arguments_of(document, "echo") == (
        "List 1 true null two Nested key secret:DESK_TOKEN ticket result of step open · id"
    )


def test_after_execution_references_show_the_value_they_took(people, reviewer, desk):
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    decide.approve(workflow, by=people["reviewer2"])
    run_until(workflow.pk, "COMPLETE")
    ticket_id = desk.tickets()[0]["id"]

    document = page(reviewer, f"/workflows/{workflow.pk}/")

    assert arguments_of(document, "close") == f"Ticket id result of step open · id = {ticket_id}"
    assert arguments_of(document, "note") == (
        f"Ticket id result of step open · id = {ticket_id} Body Extinguisher on its way"
    )


def test_long_text_is_folded_behind_its_first_words(people, reviewer):
    plan = ticket_plan()
    plan["steps"][0]["args"]["body"] = LONG
    workflow = plans.submit(people["agent"], plan).workflow

    for document in (page(reviewer, f"/workflows/{workflow.pk}/"), page(reviewer, "/")):
        folded = re.search(
            r'<details class="v-long"><summary>(.*?)</summary><pre class="args">(.*?)</pre>', document, re.S
        )
        assert folded is not None
        assert html.unescape(re.sub(r"<[^>]+>", "", folded.group(1))) == (
            f"{LONG[:80]}… show all {len(LONG)} charactersshow less"
        )  # one of the last two is drawn
        assert html.unescape(folded.group(2)) == LONG


def test_raw_arguments_are_json_never_python_repr(people, client, desk):
    from workflows.operations import compensation

    plan = ticket_plan()
    plan["context"] = {"why": "printer", "flags": [True, None]}
    plan["steps"].append({"key": "echo", "action": "noop", "args": {"ok": True, "none": None, "n": 1.5}})
    workflow = plans.submit(people["agent"], plan).workflow
    decide.approve(workflow, by=people["reviewer2"])
    run_until(workflow.pk, "COMPLETE")
    comp = compensation.request(workflow, by=people["operator"], reason="undo the test")
    assert client.login(username="admin", password=PASSWORD)

    pages = {
        "review": page(client, f"/workflows/{workflow.pk}/"),
        "compensation": page(client, f"/compensations/{comp.pk}/"),
    }

    for name, document in pages.items():
        raw = _raw_blocks(document)
        assert '"ok": true' in raw and '"none": null' in raw, name
        for repr_only in ("True", "None", "{'", "['", "': "):
            assert repr_only not in raw, (name, repr_only)
    raw = _raw_blocks(pages["review"])
    assert '"flags": [\n    true,\n    null\n  ]' in raw
    audit = re.findall(r"<td><code>(\{.*?\})</code></td></tr>", pages["review"])
    assert audit and all(html.unescape(cell).startswith('{"') for cell in audit)


def _raw_blocks(document: str) -> str:
    """Every raw value the page shows: preformatted blocks and audit data cells."""
    blocks = re.findall(r'<pre class="args">(.*?)</pre>', document, re.S)
    blocks += re.findall(r"<td><code>(\{.*?\})</code></td></tr>", document)
    return html.unescape("\n".join(blocks))


def test_hostile_arguments_and_previews_are_escaped(people, reviewer, desk):
    ticket = desk.request("POST", "/tickets", json={"title": SCRIPT}).json()
    plan = {
        "name": "hostile",
        "submission_key": "hostile",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": SCRIPT, "body": SCRIPT * 30}},
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket["id"]}},
            {"key": "echo", "action": "noop", "args": {SCRIPT: {SCRIPT: [SCRIPT]}}},
        ],
    }
    workflow = plans.submit(people["agent"], plan).workflow
    tasks.compute_previews(str(workflow.pk))

    for document in (
        page(reviewer, f"/workflows/{workflow.pk}/"),
        page(reviewer, "/"),
        page(reviewer, f"/workflows/{workflow.pk}/steps/"),
    ):
        assert SCRIPT not in document
        assert "&lt;script&gt;alert(1)&lt;/script&gt;" in document
    assert "Close ticket #1 “&lt;script&gt;alert(1)&lt;/script&gt;” (now open)" in page(
        reviewer, f"/workflows/{workflow.pk}/"
    )


def test_the_inbox_shows_each_steps_preview(people, reviewer, desk):
    ticket = desk.request("POST", "/tickets", json={"title": "Printer on fire"}).json()
    plan = {
        "name": "close",
        "submission_key": "close",
        "steps": [{"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket["id"]}}],
    }
    workflow = plans.submit(people["agent"], plan).workflow
    assert 'data-testid="preview-pending">Preview pending' in page(reviewer, "/")

    tasks.compute_previews(str(workflow.pk))

    document = page(reviewer, "/")
    assert f"Close ticket #{ticket['id']} “Printer on fire” (now open)" in document
    # The inbox decides nothing: it carries no digest into any form.
    assert 'name="preview"' not in document
