"""Several plans decided from the inbox in the system Chromium, scripts off
(docs/guides/reviewers.md#deciding-several-plans-at-once): select, one
confirmation listing each plan and revision, Confirm, each plan's outcome;
a plan edited after the confirmation was shown is refused, the others are
decided."""

import pytest
from playwright.sync_api import expect

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import previews_taken
from workflows.models import Approval, Workflow
from workflows.operations import plans

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

HOSTILE = '<img src=x onerror="window.__xss=1">Refund <b>A-1</b>'


@pytest.fixture
def page_without_js(browser):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, java_script_enabled=False)
    context.set_default_timeout(10_000)
    yield context.new_page()
    context.close()


def _submit(user, key, name):
    plan = {**ticket_plan(key), "name": name}
    workflow = plans.submit(user, plan).workflow
    previews_taken(workflow.pk)
    return workflow


def test_a_reviewer_approves_selected_plans_through_one_confirmation(live_server, people, page_without_js):
    page = page_without_js
    first = _submit(people["agent"], "bulk-1", HOSTILE)
    edited = _submit(people["agent"], "bulk-2", "Close the printer ticket")
    third = _submit(people["agent"], "bulk-3", "Open the scanner ticket")
    page.goto(f"{live_server.url}/login/")
    page.get_by_label("Username").fill("reviewer")
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()

    for workflow in (first, edited, third):
        page.get_by_label(f"Select {workflow.name}").check()
    with page.expect_navigation():
        page.get_by_role("button", name="Approve selected").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Approve 3 plans?")
    listed = page.get_by_test_id("selected-plan")
    expect(listed).to_have_count(3)
    # In the inbox's order (newest first); the hostile name shown as text.
    for workflow in (first, edited, third):
        plan = listed.filter(has=page.get_by_role("link", name=workflow.name, exact=True))
        expect(plan.get_by_test_id("selected-revision")).to_contain_text(
            f"Approve revision 1 (plan hash {workflow.plan_hash[:12]}"
        )
    page.screenshot(path=SCREENSHOTS / "bulk-confirmation.png", full_page=True)

    # Another reviewer edits one plan while this page is open.
    decide.revise(edited, by=people["reviewer2"], steps=[{"key": "open", "args": {"title": "Scanner", "body": "2"}}])
    page.get_by_label("Comment (on each decision)").fill("Checked all three")
    with page.expect_navigation():
        page.get_by_role("button", name="Confirm: approve 3 plans").click()

    expect(page.get_by_role("heading", level=1)).to_have_text("Approve: 2 decided, 1 refused")
    results = page.get_by_test_id("decision-result")
    expect(results).to_have_count(3)
    for workflow in (first, third):
        expect(results.filter(has_text=workflow.name)).to_contain_text("Approved")
    refused = results.filter(has_text=edited.name)
    expect(refused).to_contain_text("Refused: The plan changed since you looked")
    expect(refused.get_by_role("link", name="See what changed →")).to_be_visible()
    page.screenshot(path=SCREENSHOTS / "bulk-results.png", full_page=True)

    statuses = dict(Workflow.objects.values_list("pk", "status"))
    assert (statuses[first.pk], statuses[edited.pk], statuses[third.pk]) == ("APPROVED", "PLANNED", "APPROVED")
    assert sorted(Approval.objects.values_list("comment", flat=True)) == ["Checked all three"] * 2
