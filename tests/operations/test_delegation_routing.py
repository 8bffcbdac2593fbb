"""While a reviewer is away, what would reach them reaches their delegate
(docs/explanation/review.md#delegation): the notice of a new plan, its
reminders, escalations and assignments; each person told once. The
delegate decides with their own eligibility, and their decision names
`delegated_from`; the one away may still decide; once `until` passes,
everything reaches them again."""

import time
from datetime import timedelta

import pytest
from django.contrib.auth.models import Group
from django.core import mail
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.plans import gated_plan, ticket_plan
from tests.support.running import run_until
from workflows import tasks
from workflows.engine import policy
from workflows.errors import NotAllowed
from workflows.models import AuditEvent, Delegation, ReviewNotice, Workflow
from workflows.operations import claims, delegation, notifications, plans

REVIEW = {"deadline_seconds": 3600, "remind_before_seconds": [1800], "escalate_to": "leads"}


@pytest.fixture
def mailboxes(people):
    for name in ("reviewer", "reviewer2", "admin", "operator"):
        people[name].email = f"{name}@example.com"
        people[name].save()
    return people


def away(people, who: str, to: str, **until) -> Delegation:
    return delegation.start(people[who], to=to, until=timezone.now() + timedelta(**(until or {"days": 1})))


def back_already(row: Delegation) -> None:
    """The delegation's time passed (it stays open until the worker closes it)."""
    Delegation.objects.filter(pk=row.pk).update(
        since=timezone.now() - timedelta(days=2), until=timezone.now() - timedelta(seconds=1)
    )


def told(prefix: str = "") -> list[str]:
    return sorted(m.to[0] for m in mail.outbox if m.subject.startswith(prefix))


def submitted(people, key="plan-1", **extra) -> Workflow:
    return plans.submit(people["agent"], ticket_plan(key, **extra)).workflow


def test_the_notice_of_a_new_plan_goes_to_the_delegate_once_and_not_to_the_one_away(mailboxes):
    away(mailboxes, "reviewer", "reviewer2")
    workflow = submitted(mailboxes)
    assert tasks.notify_reviewers(str(workflow.pk)) == 2
    assert told() == ["admin@example.com", "reviewer2@example.com"]  # reviewer2 once, though told for two
    notified = AuditEvent.objects.get(workflow_id=workflow.pk, verb="reviewers.notified")
    assert notified.data["delegated"] == {"reviewer": "reviewer2"}  # the audit names who handed over


def test_once_until_passes_the_reviewer_is_told_again(mailboxes):
    back_already(away(mailboxes, "reviewer", "reviewer2"))
    workflow = submitted(mailboxes)
    tasks.notify_reviewers(str(workflow.pk))
    assert told() == ["admin@example.com", "reviewer2@example.com", "reviewer@example.com"]
    assert "delegated" not in AuditEvent.objects.get(workflow_id=workflow.pk, verb="reviewers.notified").data


def test_a_notice_stays_with_the_one_away_when_their_delegate_may_not_approve_the_plan(mailboxes):
    policy.update("ticket.create", by="admin", reviewer_group="ticket-approvers")
    Group.objects.create(name="ticket-approvers").user_set.add(mailboxes["reviewer"], mailboxes["admin"])
    away(mailboxes, "reviewer", "reviewer2")
    workflow = submitted(mailboxes)
    tasks.notify_reviewers(str(workflow.pk))
    # reviewer2 could not act on it: the notice is not moved to them.
    assert told() == ["admin@example.com", "reviewer@example.com"]


def test_reminders_and_escalations_go_to_the_delegate(mailboxes, django_user_model):
    lead = django_user_model.objects.create_user("lead", email="lead@example.com", password="x")
    lead.groups.add(Group.objects.create(name="leads"))
    away(mailboxes, "reviewer", "reviewer2")
    Delegation.objects.create(delegator=lead, delegate=mailboxes["operator"], until=timezone.now() + timedelta(days=1))
    workflow = plans.submit(
        mailboxes["agent"], {**ticket_plan("remind"), "deadline_seconds": 7200, "review": REVIEW}
    ).workflow
    ReviewNotice.objects.filter(workflow=workflow).update(due_at=timezone.now() - timedelta(seconds=1))

    assert notifications.send_due() == 3  # the first notice, the reminder, the escalation
    assert told("Reminder:") == ["admin@example.com", "reviewer2@example.com"]
    assert told("Escalation:") == ["operator@example.com"]  # the lead's delegate, of the plan's team
    sent = {
        e.verb: e.data["delegated"]
        for e in AuditEvent.objects.filter(
            workflow_id=workflow.pk, verb__in=["reviewers.reminder", "reviewers.escalation"]
        )
    }
    assert sent == {"reviewers.reminder": {"reviewer": "reviewer2"}, "reviewers.escalation": {"lead": "operator"}}


def test_the_delegate_s_approval_names_the_one_away(people):
    away(people, "reviewer", "reviewer2")
    workflow = submitted(people)
    decide.approve(workflow, by=people["reviewer2"])
    [event] = AuditEvent.objects.filter(workflow_id=workflow.pk, verb="workflow.approved")
    assert event.data["delegated_from"] == "reviewer"


def test_the_delegate_s_rejection_names_the_one_away_and_others_decisions_do_not(people):
    away(people, "reviewer", "reviewer2")
    rejected = submitted(people, "rejected")
    decide.reject(rejected, by=people["reviewer2"], comment="no")
    assert (
        AuditEvent.objects.get(workflow_id=rejected.pk, verb="workflow.rejected").data["delegated_from"] == "reviewer"
    )
    by_admin = submitted(people, "by-admin")
    decide.approve(by_admin, by=people["admin"])
    assert "delegated_from" not in AuditEvent.objects.get(workflow_id=by_admin.pk, verb="workflow.approved").data


def test_the_one_away_may_still_decide_themselves(people):
    away(people, "reviewer", "reviewer2")
    workflow = submitted(people)
    decide.approve(workflow, by=people["reviewer"])
    event = AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.approved")
    assert event.actor == "reviewer" and "delegated_from" not in event.data


def test_the_delegate_decides_with_their_own_eligibility(people):
    policy.update("ticket.create", by="admin", reviewer_group="ticket-approvers")
    Group.objects.create(name="ticket-approvers").user_set.add(people["reviewer"])
    away(people, "reviewer", "reviewer2")
    workflow = submitted(people)
    with pytest.raises(NotAllowed, match="ticket-approvers"):
        decide.approve(workflow, by=people["reviewer2"])
    assert Workflow.objects.get(pk=workflow.pk).status == "PLANNED"
    assert not AuditEvent.objects.filter(workflow_id=workflow.pk, verb__startswith="workflow.appro").exists()


def test_after_until_passes_the_delegate_s_decision_is_their_own(people):
    back_already(away(people, "reviewer", "reviewer2"))
    workflow = submitted(people)
    decide.approve(workflow, by=people["reviewer2"])
    assert "delegated_from" not in AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.approved").data


def test_an_assignment_to_the_one_away_goes_to_the_delegate_and_their_decision_names_them(people):
    away(people, "reviewer", "reviewer2")
    workflow = submitted(people)
    claims.assign(workflow, by=people["admin"], to="reviewer")
    workflow.refresh_from_db()
    assert claims.holder(workflow) == people["reviewer2"]
    event = AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.assigned")
    assert (event.data["to"], event.data["delegated_from"]) == ("reviewer2", "reviewer")


def test_a_plan_the_one_away_still_holds_is_decided_on_their_behalf(people):
    workflow = submitted(people)
    claims.claim(workflow, by=people["admin"])  # admin holds it, then goes away
    delegation.start(people["admin"], to="reviewer2", until=timezone.now() + timedelta(days=1))
    away(people, "reviewer", "reviewer2")
    decide.approve(workflow, by=people["reviewer2"])
    # The holder comes first among those who handed their queue to reviewer2.
    assert AuditEvent.objects.get(workflow_id=workflow.pk, verb="workflow.approved").data["delegated_from"] == "admin"


def test_one_hop_a_delegate_s_own_delegation_is_not_followed(mailboxes):
    away(mailboxes, "reviewer", "reviewer2")
    away(mailboxes, "reviewer2", "admin")  # reviewer2 leaves later, to admin
    workflow = submitted(mailboxes)
    tasks.notify_reviewers(str(workflow.pk))
    # reviewer's notice goes to reviewer2 (their choice), reviewer2's own to admin.
    assert told() == ["admin@example.com", "reviewer2@example.com"]


@pytest.mark.django_db(transaction=True)
def test_a_running_worker_closes_a_lapsed_delegation_audited_once(people, start_worker):
    back_already(away(people, "reviewer", "reviewer2"))
    start_worker()
    deadline = time.monotonic() + 60
    while Delegation.objects.open().exists():
        assert time.monotonic() < deadline, "the worker never closed the lapsed delegation"
        time.sleep(0.2)
    [ended] = AuditEvent.objects.filter(verb="delegation.ended")
    assert (ended.actor, ended.data["reason"]) == ("system", "expired")


def test_the_delegate_s_gate_approval_names_the_one_away(people, desk):
    workflow = plans.submit(people["agent"], gated_plan()).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(str(workflow.pk), "WAITING_GATE")
    away(people, "admin", "reviewer2")
    decide.gate_approve(workflow, "close", by=people["reviewer2"])
    assert AuditEvent.objects.get(workflow_id=workflow.pk, verb="gate.opened").data["delegated_from"] == "admin"
