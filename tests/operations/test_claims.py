"""Claims (docs/explanation/review.md#review): a reviewer claims a plan ("I'm on it"), releases it
or hands it to another reviewer; the inbox shows who holds what and filters
"mine" / "unclaimed"; a claim lapses after REVIEW_CLAIM_MINUTES without its
holder's activity, and it never blocks another reviewer's decision."""

from datetime import timedelta

import pytest
from django.utils import timezone

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from tests.support.seeing import Client
from workflows.models import AuditEvent, Workflow
from workflows.operations import claims, plans


@pytest.fixture
def planned(people):
    return plans.submit(people["agent"], ticket_plan("claim-1")).workflow


def console(persona):
    client = Client()
    assert client.login(username=persona, password=PASSWORD)
    return client


def lapse(workflow, settings, by_minutes=1):
    """Move the claim's last activity back past REVIEW_CLAIM_MINUTES."""
    Workflow.objects.filter(pk=workflow.pk).update(
        claimed_at=timezone.now() - timedelta(minutes=settings.REVIEW_CLAIM_MINUTES + by_minutes)
    )


def test_a_reviewer_claims_a_plan_and_the_api_shows_who_until_when(api, planned, settings):
    answer = api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    assert answer.status_code == 200, answer.content
    body = answer.json()
    assert body["claimed_by"] == "reviewer"
    expires = timezone.datetime.fromisoformat(body["claim_expires_at"])
    assert (
        timedelta(minutes=settings.REVIEW_CLAIM_MINUTES - 1)
        < expires - timezone.now()
        <= timedelta(minutes=settings.REVIEW_CLAIM_MINUTES)
    )
    assert api["agent"].get(f"/workflows/{planned.pk}").json()["claimed_by"] == "reviewer"
    event = AuditEvent.objects.get(verb="workflow.claimed", workflow_id=planned.pk)
    assert event.actor == "reviewer" and event.data == {"renewed": False}


def test_a_plan_someone_holds_cannot_be_claimed_over_them_but_they_can_hand_it_on(api, planned):
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")

    taken = api["reviewer2"].post(f"/workflows/{planned.pk}/claim")
    assert taken.status_code == 409
    assert "reviewer is handling this plan" in taken.json()["error"]["message"]
    assert api["reviewer2"].post(f"/workflows/{planned.pk}/release").status_code == 403
    assert api["reviewer2"].post(f"/workflows/{planned.pk}/assign", {"to": "reviewer2"}).status_code == 409

    handed = api["reviewer"].post(f"/workflows/{planned.pk}/assign", {"to": "reviewer2"})
    assert handed.status_code == 200 and handed.json()["claimed_by"] == "reviewer2"
    event = AuditEvent.objects.get(verb="workflow.assigned")
    assert (event.actor, event.data) == ("reviewer", {"to": "reviewer2", "from": "reviewer"})

    released = api["reviewer2"].post(f"/workflows/{planned.pk}/release")
    assert released.status_code == 200 and released.json()["claimed_by"] is None
    assert AuditEvent.objects.filter(verb="workflow.claim_released", actor="reviewer2").count() == 1
    assert api["reviewer2"].post(f"/workflows/{planned.pk}/release").status_code == 409  # nothing held now


def test_claiming_ones_own_claim_again_renews_it(api, planned, settings):
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    lapse(planned, settings, by_minutes=-5)  # five minutes left
    renewed = api["reviewer"].post(f"/workflows/{planned.pk}/claim").json()
    assert timezone.datetime.fromisoformat(renewed["claim_expires_at"]) - timezone.now() > timedelta(
        minutes=settings.REVIEW_CLAIM_MINUTES - 1
    )
    assert AuditEvent.objects.filter(verb="workflow.claimed").last().data == {"renewed": True}


@pytest.mark.parametrize(
    "to, why",
    [
        ("nobody", "Not an active reviewer."),
        ("operator", "Not an active reviewer."),
        ("agent", "Not an active reviewer."),
    ],
)
def test_assigning_to_someone_who_cannot_review_is_refused_with_the_field(api, planned, to, why):
    answer = api["reviewer"].post(f"/workflows/{planned.pk}/assign", {"to": to})
    assert answer.status_code == 400
    assert answer.json()["error"]["fields"] == {"to": why}
    assert Workflow.objects.get(pk=planned.pk).claimed_by is None
    assert not AuditEvent.objects.filter(verb="workflow.assigned").exists()


@pytest.mark.parametrize("body", [{}, {"to": ""}, {"to": "reviewer2", "extra": 1}, {"to": ["reviewer2"]}])
def test_a_malformed_assignment_is_refused_and_changes_nothing(api, planned, body):
    assert api["reviewer"].post(f"/workflows/{planned.pk}/assign", body).status_code in (400, 422)
    assert Workflow.objects.get(pk=planned.pk).claimed_by is None


def test_only_reviewers_other_than_the_submitter_claim(api, people, planned):
    for persona in ("agent", "operator", "auditor"):
        assert api[persona].post(f"/workflows/{planned.pk}/claim").status_code == 403, persona
    own = plans.submit(people["reviewer"], ticket_plan("own-plan")).workflow
    assert api["reviewer"].post(f"/workflows/{own.pk}/claim").status_code == 403
    assert api["reviewer2"].post(f"/workflows/{own.pk}/assign", {"to": "reviewer"}).json()["error"]["fields"] == {
        "to": "The plan's submitter cannot review it."
    }


def test_a_claim_never_blocks_another_reviewers_decision(api, planned):
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    decided = api["reviewer2"].post(f"/workflows/{planned.pk}/approve", {"comment": "looked at it"})
    assert decided.status_code == 200 and decided.json()["status"] == "APPROVED"
    assert decided.json()["claimed_by"] is None  # decided: nothing awaits a decision, nobody holds it
    assert api["reviewer"].post(f"/workflows/{planned.pk}/claim").status_code == 409


def test_a_claim_lapses_without_activity_and_anyone_may_claim_then(api, planned, settings):
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    lapse(planned, settings)
    assert api["agent"].get(f"/workflows/{planned.pk}").json()["claimed_by"] is None
    assert [w["id"] for w in api["reviewer2"].get("/workflows", claim="unclaimed").json()["items"]] == [str(planned.pk)]
    assert api["reviewer2"].post(f"/workflows/{planned.pk}/claim").json()["claimed_by"] == "reviewer2"


def test_the_holder_opening_the_plan_renews_the_claim_and_nobody_elses_look_does(api, planned, settings):
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    lapse(planned, settings, by_minutes=-2)  # two minutes left
    before = Workflow.objects.get(pk=planned.pk).claimed_at
    api["reviewer2"].get(f"/workflows/{planned.pk}")
    console("reviewer2").get(f"/workflows/{planned.pk}/")
    assert Workflow.objects.get(pk=planned.pk).claimed_at == before
    console("reviewer").get(f"/workflows/{planned.pk}/")
    assert Workflow.objects.get(pk=planned.pk).claimed_at > before + timedelta(
        minutes=settings.REVIEW_CLAIM_MINUTES - 3
    )


def test_the_api_filters_mine_and_unclaimed(api, people, planned):
    other = plans.submit(people["agent"], ticket_plan("claim-2")).workflow
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    mine = api["reviewer"].get("/workflows", claim="mine").json()["items"]
    assert [w["id"] for w in mine] == [str(planned.pk)]
    assert api["reviewer2"].get("/workflows", claim="mine").json()["items"] == []
    assert [w["id"] for w in api["reviewer2"].get("/workflows", claim="unclaimed").json()["items"]] == [str(other.pk)]
    assert api["reviewer"].get("/workflows", claim="everything").status_code in (400, 422)


def test_the_inbox_shows_who_holds_what_and_filters_mine_and_unclaimed(api, people, planned):
    other = plans.submit(people["agent"], ticket_plan("claim-2")).workflow
    api["reviewer"].post(f"/workflows/{planned.pk}/claim")
    reviewer = console("reviewer")

    page = reviewer.get("/").content.decode()
    assert "handled by reviewer (you)" in page and "unclaimed" in page
    mine = reviewer.get("/?claim=mine").content.decode()
    assert str(planned.pk) in mine and str(other.pk) not in mine
    free = reviewer.get("/?claim=unclaimed").content.decode()
    assert str(other.pk) in free and str(planned.pk) not in free
    assert reviewer.get("/?claim=<script>").status_code == 400

    seen_by_other = console("reviewer2").get(f"/workflows/{planned.pk}/").content.decode()
    assert "reviewer is handling this plan; you can still decide it." in seen_by_other
    assert f'formaction="/workflows/{planned.pk}/approve"' in seen_by_other  # and the decision is still theirs


def test_the_console_claims_assigns_and_releases(people, planned):
    reviewer = console("reviewer")
    reviewer.post(f"/workflows/{planned.pk}/claim")
    assert claims.holder(Workflow.objects.get(pk=planned.pk)) == people["reviewer"]
    page = reviewer.get(f"/workflows/{planned.pk}/").content.decode()
    assert 'data-testid="claimed-by"' in page and "Release" in page and '<option value="reviewer2">' in page
    assert '<option value="agent">' not in page  # the submitter is never offered

    reviewer.post(f"/workflows/{planned.pk}/assign", {"to": "reviewer2"})
    assert claims.holder(Workflow.objects.get(pk=planned.pk)) == people["reviewer2"]
    refused = reviewer.post(f"/workflows/{planned.pk}/release", follow=True).content.decode()
    assert "Only reviewer2, who holds this plan, can release it" in refused
    console("reviewer2").post(f"/workflows/{planned.pk}/release")
    assert claims.holder(Workflow.objects.get(pk=planned.pk)) is None
    assert console("agent").post(f"/workflows/{planned.pk}/claim").status_code == 403
