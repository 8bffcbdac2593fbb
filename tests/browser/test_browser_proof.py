"""The workflow page shows, per attempt, the approval proof its writes
carried (docs/explanation/approval-proofs.md#approval-proof): the signing key's id and the approvers it names."""

import pytest
from playwright.sync_api import expect

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows.models import Attempt
from workflows.operations import compensation, plans

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900})
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def test_the_workflow_page_shows_each_attempts_proof_key_and_approvers(live_server, people, proof_desk, page):
    plan = ticket_plan(
        "proof-page", steps=[{"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire"}}]
    )
    workflow = decide.approve(plans.submit(people["agent"], plan).workflow, by=people["reviewer"])
    run_until(workflow.pk, "COMPLETE")
    comp = compensation.request(workflow, by=people["operator"], reason="opened by mistake")
    decide.authorize(comp, by=people["reviewer2"])
    run_until(workflow.pk, "COMPENSATED")
    forward, undo = Attempt.objects.filter(step__workflow=workflow).order_by("step__lane")

    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("auditor")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    page.goto(f"{live_server.url}/workflows/{workflow.pk}/")

    opened = page.get_by_test_id("step-open").get_by_test_id("attempt-proof")
    expect(opened.get_by_test_id("proof-kid")).to_have_text(forward.proof_kid)
    expect(opened.get_by_test_id("proof-approver")).to_have_text(["reviewer"])
    expect(opened).to_have_attribute("title", f"Approval proof {forward.proof_jti}")
    undone = page.get_by_test_id(f"step-{undo.step.key}").get_by_test_id("attempt-proof")
    expect(undone.get_by_test_id("proof-kid")).to_have_text(undo.proof_kid)
    expect(undone.get_by_test_id("proof-approver")).to_have_text(["operator", "reviewer2"])
    page.screenshot(path=SCREENSHOTS / "workflow-approval-proofs.png", full_page=True)
