"""Effect previews on the review page, in the system Chromium, with a real
worker and the real ticket desk: the preview a worker took is on the page
before the Approve button, the approval binds what the page showed, and a
ticket closed after approval shows both previews side by side until a
reviewer approves the new one."""

import pytest
import requests
from playwright.sync_api import expect

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.personas import PASSWORD
from tests.support.running import wait_for_status
from workflows import tasks
from workflows.models import Approval, Step, Workflow
from workflows.operations import approvals, plans

pytestmark = [pytest.mark.browser, pytest.mark.live, pytest.mark.django_db(transaction=True)]


@pytest.fixture
def page(browser, live_server):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, base_url=live_server.url)
    context.set_default_timeout(15_000)
    page = context.new_page()
    yield page
    context.close()


def log_in(page, username):
    page.goto("/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()


def open_ticket(desk, title) -> dict:
    return requests.post(f"{desk.url}/tickets", json={"title": title}, timeout=10).json()


def close_plan(ticket_id, key) -> dict:
    return {
        "name": f"Close the printer ticket ({key})",
        "submission_key": key,
        "steps": [{"key": "close", "action": "ticket.close", "args": {"ticket_id": ticket_id}}],
    }


def test_the_preview_a_worker_took_is_shown_before_the_approve_button(page, people, start_worker, desk):
    ticket = open_ticket(desk, "Printer on fire")
    workflow = plans.submit(people["agent"], close_plan(ticket["id"], "preview-shown")).workflow
    log_in(page, "reviewer")
    page.get_by_role("link", name=workflow.name, exact=True).click()
    expect(page.get_by_test_id("preview-pending")).to_be_visible()  # no worker yet: nothing taken in the request

    start_worker()
    # The page looks again while the preview is pending, and shows it when a worker has taken it.
    summary = page.get_by_test_id("preview-summary")
    expect(summary).to_have_text(f"Close ticket #{ticket['id']} “Printer on fire” (now open)")
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_visible()
    assert summary.bounding_box()["y"] < approve.bounding_box()["y"]
    page.screenshot(path=SCREENSHOTS / "preview-before-approve.png", full_page=True)

    approve.click()
    expect(page.get_by_test_id("workflow-status")).to_have_text("COMPLETE")
    approval = Approval.objects.get(workflow=workflow)
    assert approval.preview_digests == {"close": Step.objects.get(workflow=workflow).preview_digest}
    assert desk.ticket(ticket["id"])["status"] == "closed"


def test_a_preview_taken_again_while_the_page_was_open_is_refused_and_shown(page, people, desk):
    ticket = open_ticket(desk, "Printer on fire")
    workflow = plans.submit(people["agent"], close_plan(ticket["id"], "preview-stale")).workflow
    tasks.compute_previews(str(workflow.pk))
    log_in(page, "reviewer")
    page.get_by_role("link", name=workflow.name, exact=True).click()
    expect(page.get_by_test_id("preview-summary")).to_contain_text("(now open)")

    # Meanwhile the ticket is closed at the desk and another reviewer has the preview taken again.
    requests.post(f"{desk.url}/tickets/{ticket['id']}/close", timeout=10)
    approvals.retake_previews(workflow, by=people["reviewer2"])
    tasks.compute_previews(str(workflow.pk))
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_role("status")).to_contain_text("The effect previews changed since you looked")
    expect(page.get_by_test_id("preview-summary")).to_contain_text("(now closed)")
    page.screenshot(path=SCREENSHOTS / "preview-stale-refused.png", full_page=True)
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    assert not Approval.objects.exists()


def test_a_ticket_closed_after_approval_shows_both_previews_until_the_new_one_is_approved(
    page, people, start_worker, desk
):
    ticket = open_ticket(desk, "Printer on fire")
    workflow = plans.submit(people["agent"], close_plan(ticket["id"], "preview-binding")).workflow
    tasks.compute_previews(str(workflow.pk))
    shown = {"close": Step.objects.get(workflow=workflow).preview_digest}
    decide.approve(workflow, by=people["reviewer2"], preview_digests=shown)
    requests.post(f"{desk.url}/tickets/{ticket['id']}/close", timeout=10)  # after approval, before any worker
    start_worker()
    wait_for_status(workflow.pk, "FAILED")

    log_in(page, "reviewer")
    page.goto(f"/workflows/{workflow.pk}/")
    expect(page.get_by_test_id("step-status")).to_have_text("BLOCKED")
    expect(page.get_by_test_id("approved-preview")).to_contain_text("(now open)")
    expect(page.get_by_test_id("current-preview")).to_contain_text("(now closed)")
    approved_box = page.get_by_test_id("approved-preview").bounding_box()
    current_box = page.get_by_test_id("current-preview").bounding_box()
    assert approved_box["x"] < current_box["x"] and abs(approved_box["y"] - current_box["y"]) < 5  # side by side
    page.screenshot(path=SCREENSHOTS / "preview-changed-side-by-side.png", full_page=True)

    page.get_by_role("button", name="Approve again").click()

    expect(page.get_by_test_id("workflow-status")).to_have_text("COMPLETE")
    latest = Approval.objects.filter(workflow=workflow).order_by("-created_at").first()
    assert latest.reviewer.username == "reviewer"
    assert latest.preview_digests == {"close": Step.objects.get(workflow=workflow).preview_digest} != shown
