"""Deciding from a link (docs/explanation/review.md#review): each reviewer's notice carries signed
approve and reject links bound to them, the revision and plan hash, the
decision and an expiry, usable once. Following a link shows a confirmation
page and never decides; the page's POST decides (CSRF, four eyes, a recent
sign-in). Every other use of a link is refused with a clear page."""

import json
import re
import time
from datetime import timedelta
from urllib.parse import unquote

import pytest
from django.core import mail, signing
from django.utils import timezone
from playwright.sync_api import expect

from tests.support import deciding as decide
from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows import tasks
from workflows.models import Approval, UsedReviewLink, Workflow
from workflows.operations import links, plans
from workflows.web.auth import SIGNED_IN_AT


@pytest.fixture
def planned(people):
    return plans.submit(people["agent"], ticket_plan("link-1")).workflow


def path_of(token):
    return f"/review/link/{token}/"


def signed_in(persona):
    client = Client()
    assert client.login(username=persona, password=PASSWORD)
    return client


def status(workflow):
    return Workflow.objects.get(pk=workflow.pk).status


def test_each_reviewer_gets_their_own_approve_and_reject_links(people, planned, settings):
    settings.CONSOLE_URL = "https://console.example"
    for name in ("reviewer", "reviewer2"):
        people[name].email = f"{name}@example.com"
        people[name].save()
    tasks.notify_reviewers(str(planned.pk))
    by_reviewer = {message.to[0]: message.body for message in mail.outbox}
    found = {}
    for address, body in by_reviewer.items():
        approve = re.search(r"Approve: https://console\.example(/review/link/[^/\s]+/)", body).group(1)
        reject = re.search(r"Reject:  https://console\.example(/review/link/[^/\s]+/)", body).group(1)
        found[address] = (approve, reject)
        assert "LOW risk" in body and "Time left to decide" in body
    assert found["reviewer@example.com"] != found["reviewer2@example.com"]
    # The reviewer's own approve link opens its confirmation page for them.
    page = signed_in("reviewer").get(found["reviewer@example.com"][0])
    assert page.status_code == 200 and 'data-testid="link-form"' in page.content.decode()


def test_following_a_link_never_decides_and_its_post_does_once(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    reviewer = signed_in("reviewer")
    for _ in range(3):  # a chat app fetching it ahead, the reviewer reloading
        page = reviewer.get(path_of(token))
        assert page.status_code == 200
    assert status(planned) == "PLANNED" and not UsedReviewLink.objects.exists()
    assert "Approve “Open, comment on and close a ticket”?" in page.content.decode()

    decided = reviewer.post(path_of(token), {"comment": "from my phone"})
    assert decided.status_code == 302 and decided["Location"] == f"/workflows/{planned.pk}/"
    assert status(planned) == "APPROVED"
    assert Approval.objects.get(workflow=planned).comment == "from my phone"

    again = reviewer.post(path_of(token), {})
    assert again.status_code == 403 and "used already" in again.content.decode()
    assert Approval.objects.filter(workflow=planned).count() == 1


def test_a_link_does_not_approve_before_the_plans_previews_exist(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    reviewer = signed_in("reviewer")
    # The page showed the previews still pending: it carries no digest.
    answer = reviewer.post(path_of(token), {"comment": "", "previews_shown": "1"}, follow=True)
    assert "Step open (ticket.create) cannot be approved before its preview exists" in answer.content.decode()
    assert status(planned) == "PLANNED"
    assert not UsedReviewLink.objects.exists() and not Approval.objects.exists()  # the link stays unused

    reviewer.post(path_of(token), {})  # once they are taken, the same link approves
    assert status(planned) == "APPROVED"


def test_a_reject_link_rejects(people, planned):
    token = links.make(planned, people["reviewer2"], "reject")
    signed_in("reviewer2").post(path_of(token), {"comment": "no"})
    assert status(planned) == "REJECTED"


def refused(client, token, *expected):
    for answer in (client.get(path_of(token)), client.post(path_of(token), {})):
        text = answer.content.decode()
        assert answer.status_code == 403 and 'data-testid="link-refused"' in text, text[:500]
        assert all(part in text for part in expected), text[:2000]


def test_a_link_for_another_reviewer_is_refused(people, planned):
    refused(signed_in("reviewer2"), links.make(planned, people["reviewer"], "approve"), "sent to another reviewer")
    assert status(planned) == "PLANNED"


def test_a_link_for_an_earlier_revision_is_refused(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    decide.revise(planned, by=people["reviewer2"], steps=[{"key": "open", "args": {"title": "Printer fixed"}}])
    refused(signed_in("reviewer"), token, "The plan changed since this link was sent", "revision 2")
    assert status(planned) == "PLANNED"


def test_an_expired_link_is_refused(people, planned):
    token = links.make(planned, people["reviewer"], "approve", now=timezone.now() - timedelta(days=8))
    refused(signed_in("reviewer"), token, "expired")
    assert status(planned) == "PLANNED"


@pytest.mark.parametrize(
    "tamper",
    [
        lambda token: token[:-1] + ("A" if token[-1] != "A" else "B"),  # the signature
        lambda token: signing.dumps({**signing.loads(token, salt=links.SALT), "d": "approve"}, salt="another salt"),
        lambda token: "not-a-token",
    ],
)
def test_a_tampered_link_is_refused(people, planned, tamper):
    token = links.make(planned, people["reviewer"], "reject")
    refused(signed_in("reviewer"), tamper(token), "not valid")
    assert status(planned) == "PLANNED"


def test_a_link_of_a_decided_plan_is_refused(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    signed_in("reviewer2").post(path_of(links.make(planned, people["reviewer2"], "reject")), {})
    refused(signed_in("reviewer"), token, "REJECTED")


def test_four_eyes_hold_for_a_link_made_for_the_submitter(people):
    own = plans.submit(people["reviewer"], ticket_plan("own")).workflow
    token = links.make(own, people["reviewer"], "approve")
    reviewer = signed_in("reviewer")
    answer = reviewer.post(path_of(token), {}, follow=True)
    assert "cannot be reviewed by the user who submitted it" in answer.content.decode()
    assert status(own) == "PLANNED" and not UsedReviewLink.objects.exists()  # the link stays unused


def test_a_decision_needs_a_recent_sign_in(people, planned, settings):
    token = links.make(planned, people["reviewer"], "approve")
    reviewer = signed_in("reviewer")
    session = reviewer.session
    session[SIGNED_IN_AT] = int(time.time()) - settings.DECISION_MAX_AUTH_AGE - 60
    session.save()

    answer = reviewer.post(path_of(token), {})
    assert answer.status_code == 302 and unquote(answer["Location"]) == f"/login/?next={path_of(token)}&reauth=1"
    assert status(planned) == "PLANNED" and not UsedReviewLink.objects.exists()

    assert reviewer.login(username="reviewer", password=PASSWORD)  # signing in again
    reviewer.post(path_of(token), {})
    assert status(planned) == "APPROVED"


def test_the_decision_needs_the_pages_csrf_token(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    guarded = Client(enforce_csrf_checks=True)
    assert guarded.login(username="reviewer", password=PASSWORD)
    assert guarded.post(path_of(token), {}).status_code == 403
    assert status(planned) == "PLANNED"


def test_signing_in_from_a_link_comes_back_to_it_and_never_leaves_the_site(people, planned):
    token = links.make(planned, people["reviewer"], "approve")
    anonymous = Client()
    first = anonymous.get(path_of(token))
    assert first.status_code == 302 and unquote(first["Location"]) == f"/login/?next={path_of(token)}"
    back = anonymous.post(first["Location"], {"username": "reviewer", "password": PASSWORD})
    assert back.status_code == 302 and back["Location"] == path_of(token)

    elsewhere = Client().post("/login/?next=https://evil.example/steal", {"username": "reviewer", "password": PASSWORD})
    assert elsewhere.status_code == 302 and not elsewhere["Location"].startswith("https://evil.example")


def test_links_never_reach_the_agents_callback(people, planned, api):
    from tests.support.webhooks import secret_for
    from workflows.webhooks.models import WebhookDelivery

    secret_for("agent")
    body = {**ticket_plan("link-hooked"), "callback_url": "https://hooks.example.com/in"}
    workflow_id = api["agent"].post("/workflows", body).json()["id"]
    tasks.notify_reviewers(workflow_id)
    api["reviewer"].post(f"/workflows/{workflow_id}/approve", {})
    bodies = [json.loads(d.body) for d in WebhookDelivery.objects.filter(workflow_id=workflow_id)]
    assert bodies and all("/review/link/" not in json.dumps(b) for b in bodies)


@pytest.mark.browser
@pytest.mark.django_db(transaction=True)
def test_a_reviewer_decides_from_a_link_in_the_browser(browser, live_server, people):
    workflow = plans.submit(people["agent"], ticket_plan("link-browser")).workflow
    tasks.compute_previews(str(workflow.pk))  # as a worker does after submission: the page shows them
    token = links.make(workflow, people["reviewer"], "approve")
    context = browser.new_context(viewport={"width": 390, "height": 844})
    page = context.new_page()
    page.goto(f"{live_server.url}{path_of(token)}")
    page.fill("#id_username", "reviewer")  # signed out: sign in first, then straight back
    page.fill("#id_password", PASSWORD)
    page.click("button[type=submit]")
    expect(page.get_by_role("heading", level=1)).to_contain_text("Approve")
    assert status(workflow) == "PLANNED"
    page.fill("#link-comment", "approved from the link")
    page.get_by_role("button", name="Approve this plan").click()
    expect(page.get_by_test_id("workflow-status")).to_have_text("APPROVED")
    assert Approval.objects.get(workflow=workflow).comment == "approved from the link"
    context.close()
