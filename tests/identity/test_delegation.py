"""A reviewer away hands their queue over (docs/explanation/review.md#delegation):
`PUT /api/v1/me/delegation` starts it, GET reads the one in force, DELETE
ends it; each start and end is audited; bad input is a 400 naming its
field and changes nothing."""

from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from tests.support.personas import PASSWORD
from tests.support.plans import ticket_plan
from workflows import roles
from workflows.models import AuditEvent, Delegation, Team
from workflows.operations import delegation, persons, plans


def later(**delta) -> str:
    return (timezone.now() + timedelta(**delta)).replace(microsecond=0).isoformat()


def events(verb: str) -> list[dict]:
    return [e.data for e in AuditEvent.objects.filter(verb=verb).order_by("seq", "id")]


def reviewer_named(django_user_model, name: str, **extra):
    user = django_user_model.objects.create_user(name, password=PASSWORD, **extra)
    user.groups.add(Group.objects.get(name=roles.REVIEWERS))
    return user


def test_a_reviewer_hands_their_queue_over_reads_it_and_ends_it(api):
    until = later(days=3)
    started = api["reviewer"].put("/me/delegation", {"to": "reviewer2", "until": until, "note": "Hiking <b>"})
    assert started.status_code == 200, started.content
    body = started.json()
    assert (body["to"], body["note"]) == ("reviewer2", "Hiking <b>")
    assert timezone.datetime.fromisoformat(body["until"]) == timezone.datetime.fromisoformat(until)
    assert api["reviewer"].get("/me/delegation").json() == body
    assert events("delegation.started") == [{"to": "reviewer2", "until": until, "note": "Hiking <b>"}]
    [row] = AuditEvent.objects.filter(verb="delegation.started")
    assert (row.actor, row.object_type, row.object_id) == ("reviewer", "user", str(api["reviewer"].user.pk))

    assert api["reviewer"].delete("/me/delegation").status_code == 204
    assert api["reviewer"].get("/me/delegation").status_code == 404
    assert api["reviewer"].delete("/me/delegation").json()["error"]["code"] == "not_found"
    assert events("delegation.ended") == [{"to": "reviewer2", "until": until, "reason": "ended"}]
    assert Delegation.objects.open().count() == 0


def test_a_new_delegation_replaces_the_one_in_force_and_ends_it_audited(api):
    first = api["reviewer"].put("/me/delegation", {"to": "reviewer2", "until": later(days=1)})
    assert first.status_code == 200
    second = api["reviewer"].put("/me/delegation", {"to": "admin", "until": later(days=2), "note": "longer"})
    assert second.status_code == 200 and second.json()["to"] == "admin"
    assert [e["reason"] for e in events("delegation.ended")] == ["replaced"]
    assert Delegation.objects.open().get().delegate.username == "admin"
    assert Delegation.objects.count() == 2  # the first kept, ended


def test_one_delegator_has_at_most_one_open_delegation_in_the_database(people):
    until = timezone.now() + timedelta(days=1)
    Delegation.objects.create(delegator=people["reviewer"], delegate=people["reviewer2"], until=until)
    with pytest.raises(IntegrityError), transaction.atomic():
        Delegation.objects.create(delegator=people["reviewer"], delegate=people["admin"], until=until)


def test_a_delegation_whose_time_passed_is_over_and_the_worker_closes_it_once(api, people):
    assert api["reviewer"].put("/me/delegation", {"to": "reviewer2", "until": later(hours=1)}).status_code == 200
    Delegation.objects.update(since=timezone.now() - timedelta(hours=2), until=timezone.now() - timedelta(minutes=1))
    assert api["reviewer"].get("/me/delegation").status_code == 404  # over at once: reads check `until`
    assert delegation.current(people["reviewer"]) is None
    assert delegation.end_lapsed() == 1
    assert delegation.end_lapsed() == 0
    [ended] = AuditEvent.objects.filter(verb="delegation.ended")
    assert (ended.actor, ended.data["reason"]) == ("system", "expired")
    row = Delegation.objects.get()
    assert row.ended_at == row.until
    assert api["reviewer"].delete("/me/delegation").status_code == 404


@pytest.mark.parametrize(
    "body, field",
    [
        ({"to": "reviewer", "until": "+1d"}, "to"),  # oneself
        ({"to": "operator", "until": "+1d"}, "to"),  # not a reviewer
        ({"to": "nobody-here", "until": "+1d"}, "to"),
        ({"to": "", "until": "+1d"}, "to"),
        ({"to": "reviewer2", "until": "-1m"}, "until"),  # in the past
        ({"to": "reviewer2", "until": "+91d"}, "until"),  # past the bound
        ({"to": "reviewer2", "until": "2030-01-01T10:00:00"}, "until"),  # no time zone
        ({"to": "reviewer2", "until": "next tuesday"}, "until"),
        ({"to": "reviewer2"}, "until"),
        ({"until": "+1d"}, "to"),
        ({"to": "reviewer2", "until": "+1d", "note": "x" * 2001}, "note"),
        ({"to": "reviewer2", "until": "+1d", "note": "token ghp_aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa"}, "note"),
        ({"to": "reviewer2", "until": "+1d", "note": "nul \x00"}, "body.note"),
        ({"to": "reviewer2", "until": "+1d", "why": "extra"}, "why"),
    ],
)
def test_bad_input_is_a_400_naming_its_field_and_changes_nothing(api, body, field):
    relative = {"+1d": later(days=1), "-1m": later(minutes=-1), "+91d": later(days=91)}
    body = {key: relative.get(value, value) for key, value in body.items()}
    answer = api["reviewer"].put("/me/delegation", body)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert field in (error.get("fields") or {}) or field == "body.note" and "NUL" in error["message"], error
    assert not Delegation.objects.exists() and not AuditEvent.objects.filter(verb__startswith="delegation.").exists()


def test_no_delegation_to_another_account_of_oneself(api, people, django_user_model):
    mine = reviewer_named(django_user_model, "reviewer-sso")
    persons.link(people["reviewer"], mine, by="admin")
    answer = api["reviewer"].put("/me/delegation", {"to": "reviewer-sso", "until": later(days=1)})
    assert answer.status_code == 400 and "another account of yours" in answer.json()["error"]["fields"]["to"]
    assert not Delegation.objects.exists()


def test_no_delegation_to_someone_who_shares_no_team_an_inactive_user_or_someone_away(api, django_user_model):
    outsider = reviewer_named(django_user_model, "pay-reviewer")
    Team.objects.create(name="payments").members.add(outsider)
    reviewer_named(django_user_model, "gone", is_active=False)
    for to, words in (("pay-reviewer", "any of your teams"), ("gone", "Not an active reviewer")):
        answer = api["reviewer"].put("/me/delegation", {"to": to, "until": later(days=1)})
        assert answer.status_code == 400 and words in answer.json()["error"]["fields"]["to"], answer.content
    # No chain starts: reviewer2 is away, so nobody hands their queue to reviewer2.
    assert api["reviewer2"].put("/me/delegation", {"to": "admin", "until": later(days=1)}).status_code == 200
    answer = api["reviewer"].put("/me/delegation", {"to": "reviewer2", "until": later(days=1)})
    assert answer.status_code == 400 and "away themselves" in answer.json()["error"]["fields"]["to"]
    assert Delegation.objects.count() == 1


@pytest.mark.parametrize("persona", ["operator", "auditor", "agent"])
def test_only_reviewers_hand_a_queue_over(api, persona):
    answer = api[persona].put("/me/delegation", {"to": "reviewer2", "until": later(days=1)})
    assert answer.status_code == 403 and answer.json()["error"]["code"] == "forbidden"
    assert api[persona].get("/me/delegation").status_code == 404  # they have none
    assert not Delegation.objects.exists()


def test_the_console_page_sets_and_ends_a_delegation_with_clear_errors(people, client):
    assert client.login(username="reviewer", password=PASSWORD)
    page = client.get("/me/delegation/")
    assert page.status_code == 200 and 'name="to"' in page.content.decode()
    assert "/me/delegation/" in client.get("/").content.decode()  # linked from the header

    refused = client.post("/me/delegation/", {"to": "reviewer", "until": later(days=1)[:16], "note": ""}, follow=True)
    assert "That is you" in refused.content.decode() and not Delegation.objects.exists()
    until = (timezone.now() + timedelta(days=2)).strftime("%Y-%m-%dT%H:%M")
    done = client.post(
        "/me/delegation/", {"to": "reviewer2", "until": until, "note": "<script>x</script>"}, follow=True
    )
    text = done.content.decode()
    assert "reviewer2" in text and "&lt;script&gt;x&lt;/script&gt;" in text and "<script>x</script>" not in text
    assert Delegation.objects.open().get().until.strftime("%Y-%m-%dT%H:%M") == until  # read as UTC

    ended = client.post("/me/delegation/end", follow=True)
    assert ended.status_code == 200 and not Delegation.objects.active().exists()
    assert [e["reason"] for e in events("delegation.ended")] == ["ended"]


def test_the_console_page_is_for_reviewers(people, client):
    assert client.login(username="operator", password=PASSWORD)
    assert client.get("/me/delegation/").status_code == 403
    assert client.post("/me/delegation/", {"to": "reviewer2", "until": later(days=1)}).status_code == 403


def test_the_console_says_when_an_assignment_went_to_the_delegate(people, client):
    delegation.start(people["reviewer2"], to="reviewer", until=timezone.now() + timedelta(days=1))
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    assert client.login(username="admin", password=PASSWORD)
    page = client.post(f"/workflows/{workflow.pk}/assign", {"to": "reviewer2"}, follow=True).content.decode()
    assert "reviewer2 is away: assigned to their delegate, reviewer." in page
    workflow.refresh_from_db()
    assert workflow.claimed_by == people["reviewer"]
