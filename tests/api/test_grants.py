"""Standing grants (docs/explanation/policies.md#standing-grants): a reviewer
of the agent's team, not its owner, grants; a destructive or irreversible
action waits for a second reviewer; each operation key is one use, counted
atomically; revoked or expired grants approve nothing and stop what they
approved."""

import threading
from datetime import UTC, datetime, timedelta

import pytest
from django.db import connections
from django.utils import timezone

from workflows.models import AgentOwner, AuditEvent, GrantUse, StandingGrant, Team
from workflows.operations import grants

TITLE = 'resource.args has title && resource.args.title like "Reset*"'


def later(**kw) -> str:
    return (datetime.now(UTC) + timedelta(**(kw or {"days": 1}))).isoformat()


def body(**changes) -> dict:
    return {"agent": "agent", "action": "ticket.create", "when": TITLE, "max_uses": 3, "until": later(), **changes}


def grant(api, who="reviewer", **changes):
    answer = api[who].post("/grants", body(**changes))
    assert answer.status_code == 201, answer.content
    return answer.json()


def step(title="Reset password", action="ticket.create", key="open"):
    return {"key": key, "action": action, "args": {"title": title, "body": "b"}}


def test_a_reviewer_grants_and_a_matching_step_takes_one_use_per_operation_key(api, people):
    shown = grant(api)
    assert (shown["status"], shown["uses"], shown["granted_by"]) == ("ACTIVE", 0, "reviewer")
    assert shown["basis"] == f"grant:{shown['id']}"
    agent = people["agent"]
    taken = grants.take(agent, step(), team="default", operation_key="wf1:open")
    assert taken is not None and str(taken.pk) == shown["id"]
    # The same operation key again (a retry, a replay): no second use.
    assert grants.take(agent, step(), team="default", operation_key="wf1:open").pk == taken.pk
    assert StandingGrant.objects.get(pk=taken.pk).uses == 1
    # A step the condition does not hold on, another agent, another action: no grant.
    assert grants.take(agent, step("Delete everything"), team="default", operation_key="wf2:open") is None
    assert grants.matching(people["reviewer2"], step(), team="default") == []
    assert grants.matching(agent, step(action="noop"), team="default") == []
    assert grants.is_live(shown["basis"]) and grants.is_live(shown["id"], "wf1:open")
    assert not grants.is_live(shown["id"], "wf2:open")
    used = AuditEvent.objects.get(verb="grant.used")
    assert (used.actor, used.data["operation_key"], used.data["granted_by"]) == (shown["basis"], "wf1:open", "reviewer")


def test_the_last_use_exhausts_the_grant_which_still_backs_what_it_approved(api, people):
    shown = grant(api, max_uses=2)
    agent = people["agent"]
    assert grants.take(agent, step(), team="default", operation_key="a:open")
    assert grants.take(agent, step(), team="default", operation_key="b:open")
    assert grants.take(agent, step(), team="default", operation_key="c:open") is None
    assert api["reviewer"].get(f"/grants/{shown['id']}").json()["status"] == "EXHAUSTED"
    assert grants.is_live(shown["id"], "b:open")
    assert "grant.exhausted" in AuditEvent.objects.values_list("verb", flat=True)


def test_a_condition_that_reads_a_reference_does_not_match(api, people):
    grant(api)
    referenced = {"key": "open", "action": "ticket.create", "args": {"title": {"$from": "find.result.t"}, "body": "b"}}
    assert grants.matching(people["agent"], referenced, team="default") == []
    # One that reads only what is known matches still.
    grant(api, when="context.steps_in_plan <= 3")
    assert len(grants.matching(people["agent"], referenced, team="default")) == 1


@pytest.mark.parametrize(
    ("changes", "field", "says"),
    [
        ({"when": "resource.nope == 1"}, "when", "attribute `nope`"),
        ({"when": "1 +"}, "when", "unexpected token"),
        ({"when": 'true }; @id("x") permit(principal, action, resource) when { true'}, "when", "one Cedar expression"),
        ({"when": "true } unless { false"}, "when", "one Cedar expression"),
        ({"when": ""}, "when", "Required"),
        ({"when": "true" + " && true" * 1000}, "when", "at most"),
        ({"max_uses": 0}, "max_uses", "1 to"),
        ({"max_uses": 10**9}, "max_uses", "1 to"),
        ({"until": later(days=-1)}, "until", "passed"),
        ({"until": later(days=400)}, "until", "90 days"),
        ({"until": "2030-01-01T00:00:00"}, "until", "time zone"),
        ({"agent": "nobody"}, "agent", "No active agent"),
        ({"agent": "reviewer2"}, "agent", "No active agent"),
        ({"action": "nope.nope"}, "action", "No installed action"),
    ],
)
def test_bad_input_is_refused_with_a_clear_400_and_nothing_stored(api, changes, field, says):
    answer = api["reviewer"].post("/grants", body(**changes))
    assert answer.status_code == 400, answer.content
    assert says in answer.json()["error"]["fields"][field]
    assert not StandingGrant.objects.exists()


def test_only_a_reviewer_of_the_agent_s_team_who_is_not_its_owner_grants(api, people):
    for who in ("operator", "auditor", "agent"):
        assert api[who].post("/grants", body()).status_code == 403
    AgentOwner.objects.create(agent=people["agent"], owner=people["reviewer"])
    refused = api["reviewer"].post("/grants", body())
    assert refused.status_code == 403 and "owner" in refused.json()["error"]["message"]
    Team.objects.create(name="payments").members.add(people["reviewer2"])
    assert api["reviewer2"].post("/grants", body()).status_code == 403  # not of the agent's team
    assert not StandingGrant.objects.exists()


def test_a_destructive_action_needs_a_second_reviewer_before_any_use(api, people):
    shown = grant(api, action="ticket.comment", when="true")
    assert (shown["status"], shown["needs_second_reviewer"]) == ("PENDING", True)
    comment = {"key": "c", "action": "ticket.comment", "args": {"ticket_id": 1, "body": "b"}}
    assert grants.take(people["agent"], comment, team="default", operation_key="x:c") is None
    url = f"/grants/{shown['id']}/authorize"
    assert api["reviewer"].post(url, {"reason": "mine"}).status_code == 403  # the grantor
    assert api["operator"].post(url, {}).status_code == 403
    AgentOwner.objects.create(agent=people["agent"], owner=people["admin"])
    assert api["admin"].post(url, {}).status_code == 403  # the agent's owner
    done = api["reviewer2"].post(url, {"reason": "checked"})
    assert done.status_code == 200 and done.json()["authorized_by"] == "reviewer2"
    assert api["reviewer2"].post(url, {}).status_code == 409
    assert grants.take(people["agent"], comment, team="default", operation_key="x:c") is not None


def test_revocation_stops_new_uses_and_what_it_approved(api, people):
    shown = grant(api)
    assert grants.take(people["agent"], step(), team="default", operation_key="a:open")
    assert api["reviewer2"].delete(f"/grants/{shown['id']}", {"reason": ""}).status_code == 400
    assert api["auditor"].delete(f"/grants/{shown['id']}", {"reason": "r"}).status_code == 403
    revoked = api["operator"].delete(f"/grants/{shown['id']}", {"reason": "agent misbehaves"})
    assert revoked.status_code == 200, revoked.content
    assert (revoked.json()["status"], revoked.json()["revoked_by"]) == ("REVOKED", "operator")
    assert not grants.is_live(shown["id"], "a:open")
    assert grants.take(people["agent"], step(), team="default", operation_key="b:open") is None
    assert api["reviewer"].delete(f"/grants/{shown['id']}", {"reason": "again"}).status_code == 409
    verbs = list(AuditEvent.objects.filter(object_type="grant").values_list("verb", flat=True).order_by("id"))
    assert verbs == ["grant.created", "grant.used", "grant.revoked"]


def test_expiry_ends_the_grant_and_the_worker_marks_it(api, people):
    shown = grant(api)
    assert grants.take(people["agent"], step(), team="default", operation_key="a:open")
    now = timezone.now()
    StandingGrant.objects.filter(pk=shown["id"]).update(created_at=now - timedelta(days=1), until=now)
    assert not grants.is_live(shown["id"])
    assert grants.take(people["agent"], step(), team="default", operation_key="b:open") is None
    assert grants.expire_lapsed() == 1 and grants.expire_lapsed() == 0
    assert api["reviewer"].get(f"/grants/{shown['id']}").json()["status"] == "EXPIRED"
    assert AuditEvent.objects.get(verb="grant.expired").actor == "system"


def test_grants_are_listed_by_their_team_with_keyset_pages(api, people):
    for n in range(3):
        grant(api, max_uses=n + 1)
    first = api["reviewer"].get("/grants", limit=2).json()
    second = api["reviewer"].get("/grants", limit=2, cursor=first["next"]).json()
    assert [g["max_uses"] for g in first["items"] + second["items"]] == [3, 2, 1] and second["next"] is None
    assert len(api["agent"].get("/grants").json()["items"]) == 3  # its own
    assert api["reviewer"].get("/grants", cursor="bad").status_code == 400
    other = Team.objects.create(name="payments")
    other.members.add(people["reviewer2"])
    assert api["reviewer2"].get("/grants").json()["items"] == []
    assert api["reviewer2"].get(f"/grants/{first['items'][0]['id']}").status_code == 404


def _race(calls):
    barrier, results, errors = threading.Barrier(len(calls)), [], []

    def run(call):
        try:
            barrier.wait(30)
            results.append(call())
        except Exception as exc:  # surfaced below
            errors.append(exc)
        finally:
            connections.close_all()

    threads = [threading.Thread(target=run, args=(call,)) for call in calls]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(60)
    assert errors == []
    return results


@pytest.mark.django_db(transaction=True)
def test_workers_racing_never_take_more_than_max_uses(people):
    """Eight workers, each on its own connection, race for three uses with
    distinct keys, then again with one shared key."""
    made = grants.create(
        people["reviewer"],
        agent="agent",
        action="ticket.create",
        when="true",
        max_uses=3,
        until=timezone.now() + timedelta(days=1),
    )
    results = _race([lambda n=n: grants.use(made, f"wf{n}:open") for n in range(8)])
    assert sorted(results) == [False] * 5 + [True] * 3
    made.refresh_from_db()
    assert (made.uses, made.status, GrantUse.objects.filter(grant=made).count()) == (3, "EXHAUSTED", 3)
    other = grants.create(
        people["reviewer"],
        agent="agent",
        action="ticket.create",
        when="true",
        max_uses=5,
        until=timezone.now() + timedelta(days=1),
    )
    assert _race([lambda: grants.use(other, "same:open") for _ in range(6)]) == [True] * 6
    other.refresh_from_db()
    assert other.uses == 1


def test_a_grant_s_audit_events_are_its_team_s(api, people):
    grant(api)
    assert AuditEvent.objects.visible_to(people["auditor"]).filter(verb="grant.created").count() == 1
    other = Team.objects.create(name="payments")
    other.members.add(people["auditor"])
    people["auditor"].__dict__.pop("_team_cache", None)
    assert AuditEvent.objects.visible_to(people["auditor"]).filter(verb="grant.created").count() == 0
