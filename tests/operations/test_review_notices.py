"""Reminders and escalation (docs/explanation/review.md#review): a plan may set a review deadline
with reminder times and an escalation group. Reviewers are reminded before
the deadline, the group is told once it passes, and the plan expires at its
own deadline: each exactly once, even with two clusters sweeping at once.
Notices name the plan, its risk, what it will do and the time left."""

import time
from datetime import timedelta
from email import message_from_string

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from workflows.models import AuditEvent, ReviewNotice, Team, Workflow
from workflows.operations import notifications, plans

REVIEW = {"deadline_seconds": 3600, "remind_before_seconds": [1800, 600], "escalate_to": "leads"}


@pytest.fixture
def leads(people, django_user_model):
    group = Group.objects.create(name="leads")
    lead = django_user_model.objects.create_user("lead", email="lead@example.com", password="x")
    lead.groups.add(group)
    for name in ("reviewer", "reviewer2"):
        people[name].email = f"{name}@example.com"
        people[name].save()
    return lead


def reviewed_plan(key="remind-1", review=REVIEW, **extra):
    return {**ticket_plan(key), "deadline_seconds": 7200, "review": review, **extra}


def come_due(workflow):
    """Each of the plan's notices, in its order, a moment ago."""
    now = timezone.now()
    for seconds, notice in enumerate(ReviewNotice.objects.filter(workflow=workflow).order_by("-due_at"), 1):
        ReviewNotice.objects.filter(pk=notice.pk).update(due_at=now - timedelta(seconds=seconds))


def test_the_plan_schedules_its_reminders_and_escalation(api, leads):
    answer = api["agent"].post("/workflows", reviewed_plan())
    assert answer.status_code == 201, answer.content
    workflow = Workflow.objects.get(pk=answer.json()["id"])
    assert workflow.review == REVIEW  # stored as submitted
    due = {(n.kind, n.due_at - workflow.created_at) for n in ReviewNotice.objects.filter(workflow=workflow)}
    assert due == {
        ("NOTICE", timedelta(0)),  # the first, that the plan awaits review
        ("REMINDER", timedelta(seconds=1800)),
        ("REMINDER", timedelta(seconds=3000)),
        ("ESCALATION", timedelta(seconds=3600)),
    }


@pytest.mark.parametrize(
    "review, field",
    [
        ({"deadline_seconds": 7200}, "review.deadline_seconds"),  # not before the plan's own deadline
        ({"deadline_seconds": 0}, "review.deadline_seconds"),
        ({"deadline_seconds": "60"}, "review.deadline_seconds"),
        ({"deadline_seconds": 60, "remind_before_seconds": [60]}, "review.remind_before_seconds"),
        ({"deadline_seconds": 60, "remind_before_seconds": [10, 10]}, "review.remind_before_seconds"),
        ({"deadline_seconds": 60, "remind_before_seconds": [1, 2, 3, 4, 5, 6]}, "review.remind_before_seconds"),
        ({"deadline_seconds": 60, "escalate_to": "nobody-by-that-name"}, "review.escalate_to"),
        ({"deadline_seconds": 60, "when": "soon"}, "review.when"),
        ([60], "review"),
    ],
)
def test_a_malformed_review_setting_is_refused_with_its_field(api, leads, review, field):
    answer = api["agent"].post("/workflows", reviewed_plan(review=review))
    assert answer.status_code == 400, answer.content
    assert field in answer.json()["error"]["fields"], answer.json()
    assert not Workflow.objects.exists() and not ReviewNotice.objects.exists()


def test_reminders_reach_reviewers_and_the_escalation_the_group_each_once(people, leads):
    workflow = plans.submit(people["agent"], reviewed_plan()).workflow
    come_due(workflow)

    assert notifications.send_due() == 4  # the first notice, two reminders, the escalation
    assert notifications.send_due() == 0  # each once

    reminders = [m for m in mail.outbox if m.subject.startswith("Reminder:")]
    assert sorted(m.to[0] for m in reminders) == ["reviewer2@example.com"] * 2 + ["reviewer@example.com"] * 2
    body = reminders[0].body
    assert workflow.name in body and "LOW risk" in body and "1. ticket.create (open)" in body
    assert "Time left to decide:" in body and "/review/link/" in body
    [escalation] = [m for m in mail.outbox if m.subject.startswith("Escalation:")]
    assert (
        escalation.to == ["lead@example.com"] and "Nobody decided this plan by its review deadline" in escalation.body
    )
    assert "/review/link/" not in escalation.body  # links are the reviewers' own
    assert AuditEvent.objects.filter(workflow_id=workflow.pk, verb="reviewers.reminder").count() == 2
    assert AuditEvent.objects.filter(workflow_id=workflow.pk, verb="reviewers.escalation").count() == 1


def test_an_agent_escalates_only_to_a_group_of_its_plans_team(people, api, leads, django_user_model):
    """A group of another team's people is refused; in a group spanning
    teams, only the plan's team's members are told (docs/explanation/decisions.md#bound-decisions)."""
    payments = Team.objects.create(name="payments")
    outsider = django_user_model.objects.create_user("pay-lead", email="pay-lead@example.com", password="x")
    outsider.groups.add(Group.objects.create(name="pay-leads"), Group.objects.get(name="leads"))
    payments.members.add(outsider)
    answer = api["agent"].post("/workflows", reviewed_plan(review={**REVIEW, "escalate_to": "pay-leads"}))
    assert answer.status_code == 400
    assert "no member of this plan's team (default)" in answer.json()["error"]["fields"]["review.escalate_to"]
    assert not Workflow.objects.exists()

    workflow = plans.submit(people["agent"], reviewed_plan()).workflow  # "leads": lead (default) and pay-lead
    come_due(workflow)
    notifications.send_due()
    [escalation] = [m for m in mail.outbox if m.subject.startswith("Escalation:")]
    assert escalation.to == ["lead@example.com"]
    assert ReviewNotice.objects.get(workflow=workflow, kind="ESCALATION").outcome == "1 member(s) of leads told"


def test_nothing_is_sent_for_a_plan_decided_before_its_notices(people, leads):
    workflow = plans.submit(people["agent"], reviewed_plan()).workflow
    decide.approve(workflow, by=people["reviewer"])
    mail.outbox.clear()
    come_due(workflow)
    assert notifications.send_due() == 4
    assert mail.outbox == []
    assert set(ReviewNotice.objects.values_list("outcome", flat=True)) == {
        "not sent: the plan is APPROVED",
        notifications.MOOT,  # the first notice
    }


@pytest.mark.django_db(transaction=True)
def test_two_clusters_remind_escalate_and_expire_each_exactly_once(people, leads, start_worker, tmp_path):
    outbox = tmp_path / "mail"
    env = {"EMAIL_BACKEND": "django.core.mail.backends.filebased.EmailBackend", "EMAIL_FILE_PATH": str(outbox)}
    start_worker(name="one", **env)
    start_worker(name="two", **env)
    review = {"deadline_seconds": 3, "remind_before_seconds": [2], "escalate_to": "leads"}
    workflow = plans.submit(people["agent"], {**reviewed_plan(review=review), "deadline_seconds": 5}).workflow

    wait_for_status(str(workflow.pk), "EXPIRED", timeout=30)
    deadline = time.monotonic() + 20
    while ReviewNotice.objects.filter(workflow=workflow, sent_at__isnull=True).exists():
        assert time.monotonic() < deadline, "notices never sent"
        time.sleep(0.2)

    messages = [
        message_from_string(part)
        for path in outbox.iterdir()
        for part in path.read_text().split("-" * 79 + "\n")
        if part.strip()
    ]
    subjects = sorted((m["To"], m["Subject"].split(":")[0]) for m in messages)
    assert subjects == [
        ("lead@example.com", "Escalation"),
        ("reviewer2@example.com", "Plan awaiting your review"),
        ("reviewer2@example.com", "Reminder"),
        ("reviewer@example.com", "Plan awaiting your review"),
        ("reviewer@example.com", "Reminder"),
    ]
    assert AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.expired").count() == 1
    assert (
        AuditEvent.objects.filter(
            workflow_id=workflow.pk, verb__in=["reviewers.reminder", "reviewers.escalation"]
        ).count()
        == 2
    )


def test_an_action_policy_sets_the_review_of_plans_that_set_none(people, leads, api):
    Group.objects.create(name="night-shift")
    tightened = api["operator"].patch(
        "/actions/ticket.create/policy",
        {
            "review_deadline_seconds": 1800,
            "review_reminder_seconds": 600,
            "escalation_group": "leads",
            "reason": "tickets must not wait",
        },
    )
    assert tightened.status_code == 200, tightened.content  # tighter: applied by one operator
    assert tightened.json()["review_deadline_seconds"] == 1800

    workflow = plans.submit(people["agent"], {**ticket_plan("by-policy"), "deadline_seconds": 7200}).workflow
    notices = {
        (n.kind, n.due_at - workflow.created_at, n.group) for n in ReviewNotice.objects.filter(workflow=workflow)
    }
    assert notices == {
        ("NOTICE", timedelta(0), ""),
        ("REMINDER", timedelta(seconds=1200), ""),
        ("ESCALATION", timedelta(seconds=1800), "leads"),
    }
    assert workflow.review is None  # the plan set none: nothing is written into what it submitted

    own = plans.submit(people["agent"], reviewed_plan("own-review")).workflow  # the plan's own review wins
    assert ReviewNotice.objects.filter(workflow=own, kind="ESCALATION").get().due_at - own.created_at == timedelta(
        seconds=3600
    )

    # Telling another group, or dropping the deadline, loosens: a second operator decides.
    for change in ({"escalation_group": "night-shift"}, {"review_deadline_seconds": None}):
        answer = api["operator"].patch("/actions/ticket.create/policy", {**change, "reason": "r"})
        assert answer.status_code == 202, (change, answer.content)
    assert (
        api["operator"]
        .patch("/actions/ticket.create/policy", {"escalation_group": "nobody", "reason": "r"})
        .status_code
        == 400
    )
