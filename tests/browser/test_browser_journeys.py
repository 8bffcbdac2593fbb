"""The console's journeys end to end in the system Chromium, one persona per
browser context: two reviewers approve a 2-of-2 plan, an operator replays a
dead letter through its preview, an operator requests a compensation that a
second reviewer authorizes, an auditor filters, exports and verifies the
trail, and a reviewer approves with the keyboard alone. Each journey runs
twice: its people sign in with a local password, then through a real
OpenID Connect provider process (their roles from its groups).

Every page visited is kept in test-artifacts/screenshots/journey-*.png, and
a page that trips the Content-Security-Policy fails its journey."""

import csv
import json
import re

import pytest
from playwright.sync_api import expect

from tests.support import deciding as decide
from tests.support.chromium import SCREENSHOTS
from tests.support.compensating import failed_workflow
from tests.support.oidc_mock import running_provider, set_person
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from tests.support.seeing import previews_taken
from workflows import roles, teams
from workflows.audit.reading import FIELDS
from workflows.engine import policy
from workflows.models import Approval, AuditEvent, Compensation, DeadLetter, ProviderIdentity, Step, Workflow
from workflows.operations import plans
from workflows.web import sso

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

CSP_SIGNS = ("Content Security Policy", "Content-Security-Policy", "Refused to")


class Browsing:
    """Opens one browser context per persona and collects what the console
    says about CSP violations on any of their pages."""

    def __init__(self, browser, base_url, issuer=None):
        self.browser = browser
        self.base_url = base_url
        self.issuer = issuer  # sign in through this provider, not with a password
        self.contexts = []
        self.violations = []

    def _watch(self, message):
        if any(sign in message.text for sign in CSP_SIGNS):
            self.violations.append(f"{message.type}: {message.text} ({message.location.get('url')})")

    def open(self):
        context = self.browser.new_context(viewport={"width": 1280, "height": 900}, base_url=self.base_url)
        context.set_default_timeout(10_000)
        self.contexts.append(context)
        page = context.new_page()
        page.on("console", self._watch)
        return page

    def log_in(self, username):
        page = self.open()
        page.goto("/login/")
        if self.issuer:
            page.get_by_role("link", name="Sign in with your identity provider").click()
            # The provider's own page: who signs in.
            page.get_by_placeholder("sub").fill(username)
            page.get_by_role("button", name="Authorize").click()
        else:
            page.get_by_label("Username").fill(username)
            page.get_by_label("Password").fill(PASSWORD)
            page.get_by_role("button", name="Log in").click()
        expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()
        if self.issuer:  # signed in as the provider's subject, with the groups it sent
            identity = ProviderIdentity.objects.select_related("user").get(issuer=self.issuer, subject=username)
            roles_held = identity.user.groups.values_list("name", flat=True)
            assert identity.groups and sorted(identity.groups) == sorted(f"idp-{role}" for role in roles_held)
        return page

    def close(self):
        for context in self.contexts:
            context.close()


@pytest.fixture(scope="module")
def provider(tmp_path_factory):
    with running_provider(tmp_path_factory.mktemp("oidc-journeys")) as issuer:
        yield issuer


def signing_in_through(issuer, settings, people):
    """The personas' accounts are the provider's subjects of their names, and
    their roles come from its groups at each sign-in."""
    settings.OIDC_ISSUER = issuer
    settings.OIDC_CLIENT_ID = "durable-console"
    settings.OIDC_CLIENT_SECRET = "mock-accepts-any-secret"
    settings.OIDC_ROLE_MAP = {role: [f"idp-{role}"] for role in roles.ALL}
    settings.OIDC_TEAM_MAP = {}
    # One team, as a small installation has: role holders land in it (without
    # it they would belong to no team and see no plan).
    settings.OIDC_DEFAULT_TEAM = "default"
    sso.forget_provider()
    for name, user in people.items():
        ProviderIdentity.objects.create(user=user, issuer=issuer, subject=name)
        if user.groups.exists():  # as their sign-ins will make them: role holders of the one team
            teams.default_team().members.add(user)
        set_person(
            issuer,
            name,
            email=f"{name}@example.com",
            groups=[f"idp-{group}" for group in user.groups.values_list("name", flat=True)],
        )


@pytest.fixture(params=["local", "sso"])
def browsing(request, browser, live_server, people, settings):  # noqa: F811
    issuer = None
    if request.param == "sso":
        issuer = request.getfixturevalue("provider")
        signing_in_through(issuer, settings, people)
    session = Browsing(browser, live_server.url, issuer)
    yield session
    session.close()
    sso.forget_provider()
    assert session.violations == [], "Content-Security-Policy violations:\n" + "\n".join(session.violations)


def shot(page, name):
    page.screenshot(path=SCREENSHOTS / f"journey-{name}.png", full_page=True)


def nav(page, name):
    page.get_by_role("navigation", name="Main").get_by_role("link", name=name, exact=True).click()


def tab_to(page, target, limit=60):
    """Press Tab until `target` has the focus, as a keyboard user would."""
    for _ in range(limit):
        if target.evaluate("element => element === document.activeElement"):
            return
        page.keyboard.press("Tab")
    raise AssertionError(f"{target} never took the focus after {limit} Tabs")


def _short(obj):
    return str(obj.pk)[:8]


# --- reviewers --------------------------------------------------------------


def test_a_two_of_two_plan_waits_for_the_second_reviewer(browsing, people):
    policy.update("ticket.create", by="admin", approvals_required=2)
    workflow = plans.submit(people["agent"], ticket_plan("journey-2-of-2")).workflow
    previews_taken(workflow.pk)  # as a worker does after submission: the page shows them

    first = browsing.log_in("reviewer")
    shot(first, "two-of-two-inbox")
    first.get_by_role("link", name=workflow.name, exact=True).click()
    expect(first.get_by_test_id("workflow-status")).to_have_text("PLANNED")
    expect(first.get_by_test_id("approval-progress")).to_have_text("0 of 2 required approvals")
    shot(first, "two-of-two-planned")
    comment = first.get_by_label("Comment")
    comment.fill("First pair of eyes")
    # As a reviewer who drags the box's resize handle: an inline size that the
    # swap must not try to carry over (style-src 'self' blocks style attributes).
    comment.evaluate("textarea => { textarea.style.height = '6em'; }")
    first.get_by_role("button", name="Approve").click()

    expect(first.get_by_test_id("approval-progress")).to_have_text("1 of 2 required approvals")
    expect(first.get_by_test_id("workflow-status")).to_have_text("PLANNED")
    expect(first.get_by_test_id("decision")).to_have_count(1)
    expect(first.get_by_test_id("decision")).to_contain_text("reviewer: APPROVE")
    shot(first, "two-of-two-first-approval")
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"

    second = browsing.log_in("reviewer2")
    second.get_by_role("link", name=workflow.name, exact=True).click()
    expect(second.get_by_test_id("approval-progress")).to_have_text("1 of 2 required approvals")
    second.get_by_label("Comment").fill("Second pair of eyes")
    second.get_by_role("button", name="Approve").click()

    expect(second.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    expect(second.get_by_role("status")).to_contain_text(f"Approved: {workflow.name}")
    expect(second.get_by_test_id("decision")).to_have_count(2)
    shot(second, "two-of-two-approved")

    assert Workflow.objects.get(pk=workflow.pk).status == "APPROVED"
    decisions = Approval.objects.filter(workflow=workflow).order_by("created_at")
    assert [(a.reviewer.username, a.decision, a.comment, a.plan_hash) for a in decisions] == [
        ("reviewer", "APPROVE", "First pair of eyes", workflow.plan_hash),
        ("reviewer2", "APPROVE", "Second pair of eyes", workflow.plan_hash),
    ]


def test_a_reviewer_logs_in_and_approves_with_the_keyboard_alone(browsing, people):
    workflow = plans.submit(people["agent"], ticket_plan("journey-keyboard")).workflow
    previews_taken(workflow.pk)  # as a worker does after submission: the page shows them
    page = browsing.open()
    page.goto("/login/")

    expect(page.get_by_label("Username")).to_be_focused()
    page.keyboard.type("reviewer")
    page.keyboard.press("Tab")
    expect(page.get_by_label("Password")).to_be_focused()
    page.keyboard.type(PASSWORD)
    page.keyboard.press("Enter")
    expect(page.get_by_role("heading", name="Plans awaiting your review")).to_be_visible()

    tab_to(page, page.get_by_role("link", name=workflow.name, exact=True))
    page.keyboard.press("Enter")
    expect(page.get_by_test_id("workflow-status")).to_have_text("PLANNED")

    tab_to(page, page.get_by_role("textbox", name="Comment"))
    page.keyboard.type("Checked without a mouse")
    page.keyboard.press("Tab")
    approve = page.get_by_role("button", name="Approve")
    expect(approve).to_be_focused()
    shot(page, "keyboard-approve-focused")
    page.keyboard.press("Enter")

    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    expect(page.get_by_role("status")).to_contain_text(f"Approved: {workflow.name}")
    shot(page, "keyboard-approved")
    approval = Approval.objects.get(workflow=workflow)
    assert (approval.reviewer.username, approval.comment) == ("reviewer", "Checked without a mouse")
    assert Workflow.objects.get(pk=workflow.pk).status == "APPROVED"


# --- operators --------------------------------------------------------------


def test_an_operator_replays_a_dead_letter_through_its_preview(browsing, people, desk):
    body = {
        "name": "Comment on a missing ticket",
        "submission_key": "journey-dead-letter",
        "steps": [
            {"key": "find", "action": "noop", "args": {"ticket": 987654}},
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "never lands"},
            },
        ],
    }
    workflow = plans.submit(people["agent"], body).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "FAILED")
    dead_letter = DeadLetter.objects.get(workflow_id=workflow.pk)
    step = Step.objects.get(pk=dead_letter.step_id)
    assert (step.status, dead_letter.failure_class) == ("DEAD_LETTERED", "INVALID_ARGUMENTS")

    page = browsing.log_in("operator")
    nav(page, "Dead letters")
    expect(page.get_by_test_id("dead-letter-row")).to_have_count(1)
    shot(page, "dead-letter-list")
    page.get_by_role("link", name=f"Details of {_short(dead_letter)}").click()

    expect(page.get_by_test_id("dead-letter-status")).to_have_text("OPEN")
    preview = page.get_by_test_id("replay-preview")
    expect(preview.get_by_test_id("operation-key")).to_have_text(step.operation_key)
    expect(page.get_by_test_id("check-result")).not_to_have_count(0)
    for result in page.get_by_test_id("check-result").all():
        expect(result).to_have_text("✓ pass")
    expect(page.get_by_test_id("will-run")).to_contain_text("Will run")
    shot(page, "dead-letter-preview")

    reason = "Ticket restored on the desk; replay with the same key"
    page.get_by_label("Reason for replay").fill(reason)
    page.get_by_role("button", name="Replay", exact=True).click()

    expect(page.get_by_test_id("dead-letter-status")).to_have_text("REPLAYED")
    expect(page.get_by_role("status")).to_contain_text(f"Replayed: note ({_short(dead_letter)})")
    expect(page.get_by_text(reason, exact=True)).to_be_visible()
    expect(page.get_by_role("button", name="Replay", exact=True)).to_have_count(0)
    shot(page, "dead-letter-replayed")

    dead_letter.refresh_from_db()
    assert (dead_letter.status, dead_letter.resolved_by.username, dead_letter.resolution_reason) == (
        "REPLAYED",
        "operator",
        reason,
    )
    step.refresh_from_db()
    assert step.status == "PENDING"
    replayed = AuditEvent.objects.get(workflow_id=workflow.pk, verb="step.replayed")
    assert (replayed.actor, replayed.data["reason"], replayed.data["operation_key"]) == (
        "operator",
        reason,
        step.operation_key,
    )


def test_an_operator_requests_a_compensation_and_a_second_reviewer_authorizes_it(browsing, people, desk):
    workflow = failed_workflow(people)
    tickets = desk.tickets()
    assert len(tickets) == 2 and {ticket["status"] for ticket in tickets} == {"open"}

    operator = browsing.log_in("operator")
    nav(operator, "Workflows")
    operator.get_by_role("link", name=workflow.name, exact=True).click()
    expect(operator.get_by_test_id("workflow-status")).to_have_text("FAILED")
    shot(operator, "compensation-failed-workflow")
    operator.get_by_role("link", name="Request compensation").click()

    expect(operator.get_by_role("heading", name="Request compensation")).to_be_visible()
    for key in ("first", "second"):
        expect(operator.get_by_role("checkbox", name=f"Include {key}")).to_be_checked()
    reason = "Incident cancelled: close both tickets"
    operator.get_by_label("Reason").fill(reason)
    shot(operator, "compensation-request")
    operator.get_by_role("button", name="Request compensation").click()

    expect(operator.get_by_test_id("compensation-status")).to_have_text("REQUESTED")
    expect(operator.get_by_test_id("compensation-reason")).to_have_text(reason)
    expect(operator.get_by_role("button", name="Authorize")).to_have_count(0)  # never the requester's own
    shot(operator, "compensation-requested")
    comp = Compensation.objects.get(workflow=workflow)
    assert (comp.status, comp.requested_by.username, comp.reason) == ("REQUESTED", "operator", reason)

    reviewer = browsing.log_in("reviewer2")
    nav(reviewer, "Compensations")
    shot(reviewer, "compensation-list")
    reviewer.get_by_role("link", name=f"Details of compensation {_short(comp)}").click()
    expect(reviewer.get_by_test_id("compensation-status")).to_have_text("REQUESTED")
    reviewer.get_by_label("Comment (optional)").fill("Both tickets are ours to close")
    reviewer.get_by_role("button", name="Authorize").click()
    expect(reviewer.get_by_test_id("compensation-status")).to_have_text(re.compile("AUTHORIZED|RUNNING"))
    shot(reviewer, "compensation-authorized")

    run_until(workflow.pk, "COMPENSATED")
    reviewer.reload()
    expect(reviewer.get_by_test_id("compensation-status")).to_have_text("COMPENSATED")
    expect(reviewer.get_by_test_id("workflow-status")).to_have_text("COMPENSATED")
    expect(reviewer.get_by_test_id("undo-status")).to_have_text(["COMPLETE", "COMPLETE"])
    shot(reviewer, "compensation-compensated")

    comp.refresh_from_db()
    assert (comp.status, comp.authorized_by.username) == ("COMPENSATED", "reviewer2")
    assert {ticket["status"] for ticket in desk.tickets()} == {"closed"}


# --- auditors ---------------------------------------------------------------


def test_an_auditor_filters_exports_and_verifies_the_trail(browsing, people):
    first = plans.submit(people["agent"], ticket_plan("journey-audit-1")).workflow
    second = plans.submit(people["agent"], ticket_plan("journey-audit-2")).workflow
    decide.approve(first, by=people["reviewer"], comment="fine")
    decide.reject(second, by=people["reviewer2"], comment="wrong floor")
    matching = list(AuditEvent.objects.filter(actor="reviewer").order_by("id").values_list("id", flat=True))
    assert matching and AuditEvent.objects.exclude(actor="reviewer").exists()

    page = browsing.log_in("auditor")
    nav(page, "Audit")
    rows = page.get_by_test_id("audit-row")
    expect(rows).to_have_count(AuditEvent.objects.count())
    shot(page, "audit-all")

    page.get_by_label("Actor").fill("reviewer")
    page.get_by_role("button", name="Filter").click()
    expect(page).to_have_url(re.compile(r"/audit/\?actor=reviewer&"))
    expect(rows).to_have_count(len(matching))
    expect(rows.locator("td:nth-child(3)")).to_have_text(["reviewer"] * len(matching))
    shot(page, "audit-filtered")

    with page.expect_download() as csv_download:
        page.get_by_role("link", name="CSV", exact=True).click()
    assert csv_download.value.suggested_filename.endswith(".csv")
    with open(csv_download.value.path(), newline="", encoding="utf-8") as exported:
        header, *lines = list(csv.reader(exported))
    assert header == list(FIELDS)
    assert [int(line[0]) for line in lines] == matching
    assert {line[FIELDS.index("actor")] for line in lines} == {"reviewer"}

    with page.expect_download() as jsonl_download:
        page.get_by_role("link", name="JSON Lines", exact=True).click()
    assert jsonl_download.value.suggested_filename.endswith(".jsonl")
    with open(jsonl_download.value.path(), encoding="utf-8") as exported:
        events = [json.loads(line) for line in exported]
    assert [event["id"] for event in events] == matching
    assert {event["actor"] for event in events} == {"reviewer"}

    page.get_by_role("button", name="Verify now").click()
    expect(page.get_by_test_id("chain-status")).to_have_text("OK")
    expect(page.get_by_role("status")).to_contain_text("Audit chain OK (whole chain)")
    shot(page, "audit-verified")


# --- the guard itself ---------------------------------------------------------


def test_the_csp_guard_sees_a_blocked_inline_script(browsing, people):
    """Proves the console listener the journeys rely on does catch a violation."""
    page = browsing.log_in("auditor")
    with page.expect_console_message(lambda message: "Content Security Policy" in message.text):
        page.evaluate("""() => {
            const script = document.createElement("script");
            script.textContent = "window.__inline_ran = true";
            document.body.append(script);
        }""")
    assert page.evaluate("window.__inline_ran") is None
    assert len(browsing.violations) == 1 and "inline script" in browsing.violations[0]
    browsing.violations.clear()


def test_a_reviewer_edits_an_argument_and_another_approves_the_revision(browsing, people):
    workflow = plans.submit(people["agent"], ticket_plan("journey-edit")).workflow
    editor = browsing.log_in("reviewer")
    editor.goto(f"/workflows/{workflow.pk}/")
    editor.get_by_test_id("edit-plan").click()
    editor.get_by_label("Title").fill("Printer on fire, floor 4")
    editor.get_by_label("Why (the agent and the audit trail see it)").fill("wrong floor")
    editor.get_by_role("button", name="Save revision 2").click()
    expect(editor.get_by_test_id("revisions")).to_contain_text("Printer on fire, floor 4")
    expect(editor.get_by_test_id("co-author")).to_be_visible()
    expect(editor.get_by_role("button", name="Approve", exact=True)).to_have_count(0)
    shot(editor, "edit-and-approve-diff")
    previews_taken(workflow.pk)  # a worker takes the new revision's previews

    other = browsing.log_in("reviewer2")
    other.goto(f"/workflows/{workflow.pk}/")
    other.get_by_role("button", name="Approve", exact=True).click()
    expect(other.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    assert Workflow.objects.get(pk=workflow.pk).revision == 2


def test_a_reviewer_approves_a_gate_after_seeing_the_results_before_it(browsing, people, desk):
    from tests.support.plans import gated_plan

    workflow = plans.submit(people["agent"], gated_plan("journey-gate")).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "WAITING_GATE")
    page = browsing.log_in("reviewer2")
    expect(page.get_by_role("heading", name="Runs waiting at a gate")).to_be_visible()
    page.get_by_role("link", name=workflow.name).click()
    expect(page.get_by_test_id("gate")).to_contain_text("Check the ticket before closing it")
    expect(page.get_by_test_id("step-open")).to_contain_text("COMPLETE")
    shot(page, "gate")
    page.get_by_label("Comment").last.fill("the ticket is the right one")
    page.get_by_role("button", name="Approve the gate").click()
    expect(page.get_by_test_id("workflow-status")).not_to_have_text("WAITING_GATE")
    assert run_until(workflow.pk, "COMPLETE") == "COMPLETE"
