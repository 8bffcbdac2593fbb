"""What a plan's deadline does (docs/explanation/review.md#on-expiry): `"on_expiry": "expire"`
(the default) ends it EXPIRED; `"escalate"` hands it once to its
`escalate_to` group with its deadline extended by `extend_seconds`, and it
expires at that second deadline. Once, even with two clusters sweeping at
once; audited, told through the review notices, and part of the plan hash."""

import json
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.core.serializers.json import DjangoJSONEncoder
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from tests.support.webhooks import secret_for
from workflows.engine import binding, expiry, policy
from workflows.models import AuditEvent, ReviewNotice, Step, Workflow
from workflows.operations import notifications, plans
from workflows.webhooks.models import WebhookDelivery

ESCALATE = {"deadline_seconds": 3600, "escalate_to": "leads", "on_expiry": "escalate", "extend_seconds": 1800}


@pytest.fixture
def leads(people, django_user_model):
    lead = django_user_model.objects.create_user("lead", email="lead@example.com", password="x")
    lead.groups.add(Group.objects.create(name="leads"))
    return lead


def submitted(people, key="escalate-1", review=ESCALATE) -> Workflow:
    """A plan whose reviewers were told of it (its first notice sent, the mail cleared)."""
    workflow = plans.submit(people["agent"], {**ticket_plan(key), "deadline_seconds": 7200, "review": review}).workflow
    notifications.notify_reviewers(workflow.pk)
    assert ReviewNotice.objects.get(workflow=workflow, kind="NOTICE").sent_at is not None
    mail.outbox.clear()
    return workflow


def overdue(workflow: Workflow) -> Workflow:
    """Its deadline a moment ago, as the sweep will find it."""
    Workflow.objects.filter(pk=workflow.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    return Workflow.objects.get(pk=workflow.pk)


def escalations(workflow: Workflow) -> int:
    return AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.escalated").count()


def test_at_its_deadline_the_plan_escalates_once_then_expires_at_the_extended_one(people, leads):
    workflow = overdue(submitted(people))
    was = workflow.deadline

    assert expiry.expire_overdue() == 0
    workflow.refresh_from_db()
    assert workflow.status == "PLANNED" and workflow.escalated_at is not None
    assert workflow.deadline == was + timedelta(seconds=1800)
    [event] = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.escalated")
    assert event.actor == "system"
    assert event.data["escalate_to"] == "leads" and event.data["extend_seconds"] == 1800
    assert event.data["deadline"] == workflow.deadline.isoformat()

    # The group is told through the review notices, and only it.
    assert notifications.send_due() == 1
    [told] = mail.outbox
    assert told.to == ["lead@example.com"] and told.subject.startswith("Escalation: plan past its deadline, extended")
    assert f"{workflow.deadline:%Y-%m-%d %H:%M}" in told.body and workflow.name in told.body
    assert AuditEvent.objects.filter(workflow_id=workflow.pk, verb="reviewers.escalation").count() == 1

    assert expiry.expire_overdue() == 0  # the extended deadline lies ahead
    assert expiry.expire_overdue() == 0 and escalations(workflow) == 1

    overdue(workflow)
    assert expiry.expire_overdue() == 1
    assert Workflow.objects.get(pk=workflow.pk).status == "EXPIRED"
    assert escalations(workflow) == 1  # never twice
    assert notifications.send_due() == 0 and len(mail.outbox) == 1


def test_the_agent_gets_workflow_escalated_once_and_the_api_says_when(api, people, leads):
    secret_for("agent")
    body = {**ticket_plan("hooked"), "deadline_seconds": 7200, "review": ESCALATE}
    answer = api["agent"].post("/workflows", {**body, "callback_url": "https://hooks.example.com/in"})
    assert answer.status_code == 201, answer.content
    assert answer.json()["escalated_at"] is None
    workflow = overdue(Workflow.objects.get(pk=answer.json()["id"]))
    was = workflow.deadline

    expiry.expire_overdue()
    expiry.expire_overdue()

    [delivery] = WebhookDelivery.objects.filter(event="workflow.escalated")
    sent = json.loads(delivery.body)
    workflow.refresh_from_db()
    assert sent["type"] == "workflow.escalated" and delivery.url == "https://hooks.example.com/in"
    assert sent["data"]["escalation"]["escalate_to"] == "leads"
    assert sent["data"]["escalation"]["deadline_was"] == DjangoJSONEncoder().default(was)
    assert sent["data"]["escalation"]["deadline"] == DjangoJSONEncoder().default(workflow.deadline)
    assert sent["data"]["workflow"]["status"] == "PLANNED" and sent["data"]["workflow"]["escalated_at"]
    shown = api["agent"].get(f"/workflows/{workflow.pk}").json()
    assert shown["escalated_at"] is not None and shown["escalated_at"] == sent["data"]["workflow"]["escalated_at"]


def test_expire_is_the_default_and_can_be_named(people, leads):
    named = overdue(submitted(people, "named", {"deadline_seconds": 3600, "on_expiry": "expire"}))
    unnamed = overdue(submitted(people, "unnamed", {"deadline_seconds": 3600, "escalate_to": "leads"}))

    assert expiry.expire_overdue() == 2

    assert {w.status for w in Workflow.objects.filter(pk__in=[named.pk, unnamed.pk])} == {"EXPIRED"}
    assert not AuditEvent.objects.filter(verb="workflow.escalated").exists()


def test_two_clusters_sweeping_at_once_escalate_once_and_neither_expires_it(people, leads):
    """The other cluster read the plan, past its deadline, before this one
    escalated it: with that stale read it neither escalates it again nor
    expires it. The conditional update's row count decides."""
    workflow = overdue(submitted(people))
    stale = Workflow.objects.get(pk=workflow.pk)

    assert expiry.expire_overdue() == 0  # this cluster escalates

    assert expiry.escalates(stale, timezone.now()) is True  # taken: nothing more to do
    assert expiry.expire_one(stale) is False  # the other cluster, as approving too late would
    workflow.refresh_from_db()
    assert workflow.status == "PLANNED" and workflow.deadline > timezone.now()
    assert escalations(workflow) == 1
    assert ReviewNotice.objects.filter(workflow=workflow, kind="ESCALATION").count() == 2  # review deadline's, this


def test_approving_after_the_deadline_escalates_instead_of_expiring_and_counts(people, leads):
    workflow = overdue(submitted(people))

    decided = decide.approve(workflow, by=people["reviewer"])

    assert decided.status == "APPROVED"
    assert escalations(workflow) == 1
    assert notifications.send_due() == 1 and mail.outbox == []  # decided before its group was told
    assert ReviewNotice.objects.get(workflow=workflow, at_expiry=True).outcome == ("not sent: the plan is APPROVED")


def test_a_plan_waiting_at_a_gate_escalates_too(people, leads):
    workflow = submitted(people)
    # As the run leaves it at a gate (tests/operations/test_gates.py runs one for real).
    Workflow.objects.filter(pk=workflow.pk).update(status="WAITING_GATE")
    Step.objects.filter(workflow=workflow, key="close").update(status="WAITING_GATE")
    overdue(workflow)

    assert expiry.expire_overdue() == 0
    assert Workflow.objects.get(pk=workflow.pk).status == "WAITING_GATE" and escalations(workflow) == 1
    notifications.send_due()
    [told] = mail.outbox
    assert told.to == ["lead@example.com"] and "at a gate" in told.body

    overdue(workflow)
    assert expiry.expire_overdue() == 1
    assert Workflow.objects.get(pk=workflow.pk).status == "EXPIRED" and escalations(workflow) == 1


@pytest.mark.parametrize(
    "review, field",
    [
        ({**ESCALATE, "on_expiry": "later"}, "review.on_expiry"),
        ({**ESCALATE, "on_expiry": None}, "review.on_expiry"),
        ({k: v for k, v in ESCALATE.items() if k != "escalate_to"}, "review.escalate_to"),
        ({k: v for k, v in ESCALATE.items() if k != "extend_seconds"}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": 0}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": -60}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": "60"}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": 60.0}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": True}, "review.extend_seconds"),
        ({**ESCALATE, "extend_seconds": plans.MAX_DEADLINE_SECONDS + 1}, "review.extend_seconds"),
        ({"deadline_seconds": 60, "on_expiry": "expire", "extend_seconds": 60}, "review.extend_seconds"),
        ({"deadline_seconds": 60, "extend_seconds": 60}, "review.extend_seconds"),
    ],
)
def test_a_malformed_expiry_setting_is_refused_with_its_field(api, leads, review, field):
    answer = api["agent"].post("/workflows", {**ticket_plan("bad"), "deadline_seconds": 7200, "review": review})

    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid" and field in error["fields"], error
    assert not error["fields"][field].startswith("Unknown field"), error  # known, and refused for its value
    assert not Workflow.objects.exists() and not ReviewNotice.objects.exists()


def test_the_expiry_settings_are_inside_the_plan_hash(people, leads):
    """Who is told and how long the plan then waits are approved with its
    steps: a plan differing only there has another hash, and one whose
    stored review was changed no longer matches its approval."""
    Group.objects.create(name="night-leads").user_set.add(leads)
    hashes = {
        submitted(people, f"hash-{n}", review).plan_hash
        for n, review in enumerate(
            [
                ESCALATE,
                {**ESCALATE, "extend_seconds": 1801},
                {**ESCALATE, "escalate_to": "night-leads"},
                {"deadline_seconds": 3600, "escalate_to": "leads", "on_expiry": "expire"},
            ]
        )
    }
    assert len(hashes) == 4
    # The whole review is hashed, whether or not it names on_expiry: its
    # deadline and escalation are approved with the steps too.
    plain = submitted(people, "plain", {"deadline_seconds": 3600, "escalate_to": "leads"})
    entries = [binding.entry(s["key"], s["action"], s["args"], s["compensation"]) for s in plain.plan]
    assert plain.plan_hash == binding.plan_hash(entries, plain.review)
    assert plain.plan_hash != binding.plan_hash(entries)

    workflow = submitted(people, "tampered")
    decide.approve(workflow, by=people["reviewer"])
    policies = list(policy.policies_for({s["action"] for s in workflow.plan}).values())
    assert len(policy.valid_approvals(workflow, policies)) == 1
    Workflow.objects.filter(pk=workflow.pk).update(review={**ESCALATE, "extend_seconds": 30 * 24 * 3600})
    assert binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0] != workflow.plan_hash
    assert policy.valid_approvals(workflow, policies) == []
