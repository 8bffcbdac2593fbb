"""A reviewer's journey in the system Chromium, with and without JavaScript."""

import re

import pytest
from playwright.sync_api import expect

from tests.support.chromium import SCREENSHOTS
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import previews_taken
from workflows.models import Approval, Workflow
from workflows.operations import plans

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]


def _new_page(browser, **context_options):
    context = browser.new_context(viewport={"width": 1280, "height": 900}, **context_options)
    context.set_default_timeout(10_000)
    return context, context.new_page()


@pytest.fixture
def page(browser):
    context, page = _new_page(browser)
    yield page
    context.close()


@pytest.fixture
def page_without_js(browser):
    context, page = _new_page(browser, java_script_enabled=False)
    yield page
    context.close()


def _submit(user, key, name=None, **step_args):
    plan = ticket_plan(key)
    if name is not None:
        plan["name"] = name
    if step_args:
        plan["steps"][0]["args"] = step_args
    workflow = plans.submit(user, plan).workflow
    previews_taken(workflow.pk)  # as a worker does after submission: the page shows them
    return workflow


def _log_in(page, base_url, username):
    page.goto(f"{base_url}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()


def _open_from_inbox(page, workflow):
    link = page.get_by_role("link", name=workflow.name, exact=True)
    expect(link).to_be_visible()
    link.click()
    expect(page).to_have_url(re.compile(rf"/workflows/{workflow.pk}/$"))
    expect(page.get_by_test_id("workflow-status")).to_have_text("PLANNED")


def test_reviewer_approves_with_an_htmx_swap(live_server, people, page):
    workflow = _submit(people["agent"], "browser-htmx")
    _log_in(page, live_server.url, "reviewer")
    page.screenshot(path=SCREENSHOTS / "inbox.png", full_page=True)
    _open_from_inbox(page, workflow)

    # A full reload would drop this marker; an htmx swap keeps it.
    page.evaluate("window.__same_document = true")
    page.get_by_label("Comment").fill("Ticket text checked in the browser")
    page.get_by_role("button", name="Approve").click()

    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    expect(page.get_by_role("status")).to_contain_text(f"Approved: {workflow.name}")
    assert page.evaluate("window.__same_document") is True
    page.screenshot(path=SCREENSHOTS / "workflow-approved.png", full_page=True)

    approval = Approval.objects.get(workflow=workflow)
    assert (approval.reviewer.username, approval.decision, approval.comment) == (
        "reviewer",
        "APPROVE",
        "Ticket text checked in the browser",
    )
    assert Workflow.objects.get(pk=workflow.pk).status == "APPROVED"


def test_reviewer_approves_without_javascript(live_server, people, page_without_js):
    page = page_without_js
    workflow = _submit(people["agent"], "browser-no-js")
    _log_in(page, live_server.url, "reviewer")
    _open_from_inbox(page, workflow)

    page.get_by_label("Comment").fill("Approved with scripts off")
    with page.expect_navigation():
        page.get_by_role("button", name="Approve").click()

    expect(page).to_have_url(re.compile(rf"/workflows/{workflow.pk}/$"))
    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    expect(page.get_by_role("status")).to_contain_text(f"Approved: {workflow.name}")
    page.screenshot(path=SCREENSHOTS / "workflow-approved-no-js.png", full_page=True)

    approval = Approval.objects.get(workflow=workflow)
    assert (approval.reviewer.username, approval.comment) == ("reviewer", "Approved with scripts off")


def test_hostile_plan_text_executes_nothing(live_server, people, page):
    name = '<script>window.__xss=1</script><script>alert(1)</script>"><img src=x onerror=alert(2)>'
    workflow = _submit(
        people["agent"],
        "browser-hostile",
        name=name,
        title="<script>window.__xss=3</script>",
        body='"><img src=x onerror=alert(4)>',
    )
    dialogs = []

    def on_dialog(dialog):
        dialogs.append(dialog.message)
        dialog.dismiss()

    page.on("dialog", on_dialog)
    _log_in(page, live_server.url, "reviewer")
    _open_from_inbox(page, workflow)
    # The name is shown as text, not dropped: escaping, not stripping.
    expect(page.get_by_role("heading", level=1)).to_contain_text(name)

    # htmx runs <script> tags in swapped content, so the partial matters too.
    page.get_by_role("button", name="Approve").click()
    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    expect(page.get_by_role("heading", level=1)).to_contain_text(name)

    assert page.locator("img").count() == 0
    assert page.evaluate("typeof window.__xss") == "undefined"
    assert dialogs == []
    assert Workflow.objects.get(pk=workflow.pk).status == "APPROVED"
