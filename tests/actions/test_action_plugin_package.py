"""A team's own action, shipped as a package: durableconsole-refunds is
installed into the virtualenv, found by its entry point (in this process
and in a real worker), and runs against the real ticket desk, once."""

import json

import pytest

from tests.support import plugin_packages
from tests.support.processes import PROJECT_DIR, manage
from tests.support.running import wait_for_status
from workflows import actions
from workflows.models import Attempt, Step

pytestmark = pytest.mark.live

REFUND = {"order_id": "A-1001", "amount_cents": 1250, "reason": "Arrived broken"}


@pytest.fixture(scope="session")
def refunds_installed(tmp_path_factory):
    with plugin_packages.installed_for_this_session("durableconsole-refunds", tmp_path_factory.mktemp("refunds")):
        yield


@pytest.fixture
def refunds(refunds_installed, rediscover):
    """This process started before the package was installed: it discovers again."""
    rediscover()


def refund_plan(key="refund-1"):
    return {
        "name": "Refund a broken order",
        "submission_key": key,
        "steps": [{"key": "refund", "action": "refunds.refund", "args": REFUND}],
    }


def approved_refund(api, key="refund-1") -> str:
    submitted = api["agent"].post("/workflows", refund_plan(key))
    assert submitted.status_code == 201, submitted.content
    workflow_id = submitted.json()["id"]
    assert api["reviewer"].post(f"/workflows/{workflow_id}/approve", {"comment": "refund it"}).status_code == 200
    return workflow_id


def test_the_installed_package_is_found_by_its_entry_point(refunds):
    source = actions.source("refunds.refund")
    assert (source.via, source.name, source.value) == ("entry point", "refunds", "durableconsole_refunds")
    assert (source.distribution, source.version, source.builtin) == ("durableconsole-refunds", "1.2.0", False)

    listed = json.loads(manage("actions", "--json").stdout)
    refund = next(action for action in listed["actions"] if action["name"] == "refunds.refund")
    assert refund["source"]["distribution"] == "durableconsole-refunds"
    assert (refund["idempotent"], refund["can_lookup"], refund["irreversible"]) == (True, True, True)
    assert refund["args_schema"]["properties"]["currency"]["enum"] == ["EUR", "GBP", "USD"]


def test_a_refund_runs_end_to_end_on_a_real_worker_and_reaches_the_desk_once(refunds, api, start_worker, desk):
    start_worker(REFUNDS_DESK_URL=desk.url)
    workflow_id = approved_refund(api)
    wait_for_status(workflow_id, "COMPLETE")
    step = Step.objects.get(workflow_id=workflow_id)
    tickets = desk.tickets()
    assert len(tickets) == 1
    assert tickets[0]["idempotency_key"] == step.operation_key
    assert tickets[0]["title"] == "Refund 12.50 EUR on order A-1001"
    assert step.result == {"refund_ticket": tickets[0]["id"], "status": "open"}
    assert step.external_ref == f"refund:{tickets[0]['id']}"
    assert [(e["method"], e["path"]) for e in desk.ledger()] == [("POST", "/tickets")]


def test_a_refund_whose_answer_is_lost_is_found_by_its_lookup_not_repeated(refunds, api, start_worker, desk):
    desk.fault(mode="commit_then_drop", count=1)
    start_worker(REFUNDS_DESK_URL=desk.url)
    workflow_id = approved_refund(api, key="refund-2")
    wait_for_status(workflow_id, "COMPLETE")
    attempts = list(Attempt.objects.filter(step__workflow_id=workflow_id).values_list("status", "failure_class"))
    assert attempts == [("RECONCILED", "TRANSIENT")]  # the answer was lost, the lookup found the ticket
    assert len(desk.tickets()) == 1
    assert [e["path"] for e in desk.ledger()] == ["/tickets"]


def test_the_guide_s_worked_example_is_the_package_these_tests_install():
    guide = (PROJECT_DIR / "docs" / "guides" / "action-authors.md").read_text()
    example = guide[guide.index("## A worked example") : guide.index("## Rules of discovery")]
    toml, python = (block.split("\n", 1)[1] for block in example.split("```")[1::2][:2])
    package = plugin_packages.SOURCES / "durableconsole-refunds"
    assert python in (package / "durableconsole_refunds" / "__init__.py").read_text()
    pyproject = (package / "pyproject.toml").read_text()
    assert all(line in pyproject for line in toml.splitlines())
