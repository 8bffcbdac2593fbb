"""Every way a plan leaves review writes its analytics row, in the same
transaction (docs/guides/analytics.md): an approval through the API, the
console and a link, a rejection, an expiry and a cancellation. The rows
are counted against the audit trail's own record of those moves, so a
path that forgot its row fails here."""

import importlib
from datetime import timedelta

from django.apps import apps as django_apps
from django.utils import timezone

from tests.support.personas import PASSWORD
from tests.support.seeing import Client
from workflows.engine import expiry, policy
from workflows.engine.transitions import move
from workflows.models import AccountLink, AuditEvent, DecisionAction, DecisionRecord, Workflow
from workflows.operations import cancellation, links, plans

ENDINGS = ("workflow.approved", "workflow.rejected", "workflow.expired", "workflow.cancelled")


def submitted(people, key, *, waited=timedelta(seconds=120), actions=("noop",)):
    steps = [{"key": f"s{n}", "action": action, "args": {}} for n, action in enumerate(actions)]
    workflow = plans.submit(people["agent"], {"name": key, "submission_key": key, "steps": steps}).workflow
    Workflow.objects.filter(pk=workflow.pk).update(created_at=timezone.now() - waited)
    return Workflow.objects.get(pk=workflow.pk)


def signed_in(persona):
    client = Client()
    assert client.login(username=persona, password=PASSWORD)
    return client


def test_every_way_out_of_review_writes_one_row(people, api):
    by_api = submitted(people, "api", actions=("noop", "noop"))
    assert api["reviewer"].post(f"/workflows/{by_api.pk}/approve", {}).status_code == 200
    rejected = submitted(people, "rejected")
    assert api["reviewer"].post(f"/workflows/{rejected.pk}/reject", {"comment": "no"}).status_code == 200
    by_console = submitted(people, "console")
    signed_in("reviewer2").post(f"/workflows/{by_console.pk}/approve", {})
    by_link = submitted(people, "link")
    token = links.make(by_link, people["reviewer"], "approve")
    assert signed_in("reviewer").post(f"/review/link/{token}/", {}).status_code in (200, 302)
    cancelled = submitted(people, "cancelled")
    cancellation.cancel(cancelled, by=people["agent"], reason="not needed")
    overdue = submitted(people, "overdue")
    Workflow.objects.filter(pk=overdue.pk).update(deadline=timezone.now() - timedelta(seconds=1))
    assert expiry.expire_overdue() == 1
    submitted(people, "still-open")

    ended = AuditEvent.objects.filter(verb__in=ENDINGS, data__from="PLANNED")
    assert ended.count() == DecisionRecord.objects.count() == 6
    assert set(ended.values_list("workflow_id", flat=True)) == set(
        DecisionRecord.objects.values_list("workflow_id", flat=True)
    )
    rows = {row.workflow_id: row for row in DecisionRecord.objects.all()}
    expected = {
        by_api.pk: ("approved", "reviewer"),
        rejected.pk: ("rejected", "reviewer"),
        by_console.pk: ("approved", "reviewer2"),
        by_link.pk: ("approved", "reviewer"),
        cancelled.pk: ("cancelled", ""),
        overdue.pk: ("expired", ""),
    }
    for pk, (outcome, reviewer) in expected.items():
        row = rows[pk]
        assert row.outcome == outcome
        assert row.reviewer_key == (f"user:{people[reviewer].pk}" if reviewer else "")
        # From the submission to the decision: the two minutes the plan waited, and the test's own time.
        assert 120 <= row.seconds < 180
        assert row.decided_at == Workflow.objects.get(pk=pk).updated_at
    # One row per distinct action of the plan.
    assert DecisionAction.objects.filter(record=rows[by_api.pk]).count() == 1
    assert DecisionAction.objects.count() == 6


def test_a_plan_needing_two_approvals_counts_once_under_the_last_person(people, api):
    policy.update("noop", by=people["operator"], reason="two reviewers", approvals_required=2)
    workflow = submitted(people, "two")
    api["reviewer"].post(f"/workflows/{workflow.pk}/approve", {})
    assert not DecisionRecord.objects.exists()
    api["reviewer2"].post(f"/workflows/{workflow.pk}/approve", {})
    (row,) = DecisionRecord.objects.all()
    assert (row.outcome, row.reviewer_key) == ("approved", f"user:{people['reviewer2'].pk}")


def test_reviewers_are_counted_by_person_not_account(people, api):
    AccountLink.objects.create(user=people["reviewer"], person="11111111-1111-1111-1111-111111111111", via="manual")
    AccountLink.objects.create(user=people["reviewer2"], person="11111111-1111-1111-1111-111111111111", via="manual")
    for key, persona in (("one", "reviewer"), ("two", "reviewer2")):
        workflow = submitted(people, key)
        assert api[persona].post(f"/workflows/{workflow.pk}/reject", {}).status_code == 200
    (person,) = api["auditor"].get("/analytics/decisions").json()["by_reviewer"]
    assert person["reviewer"] == "person:11111111-1111-1111-1111-111111111111"
    assert person["decisions"] == 2


def test_a_lost_race_writes_no_row(people):
    workflow = submitted(people, "raced")
    stale = Workflow.objects.get(pk=workflow.pk)
    cancellation.cancel(workflow, by=people["agent"], reason="first")
    assert move(stale, "REJECTED", actor=people["reviewer"]) is False
    assert DecisionRecord.objects.count() == 1


def test_the_migration_reads_earlier_endings_back_from_the_audit_trail(people, api):
    """The backfill of 0033 (run here with today's models, which have the
    fields it reads) writes the rows the paths wrote, the same ones."""
    backfill = importlib.import_module("workflows.migrations.0031_decision_analytics").backfill
    approved = submitted(people, "old-approved", actions=("noop", "noop"))
    api["reviewer"].post(f"/workflows/{approved.pk}/approve", {})
    rejected = submitted(people, "old-rejected")
    api["reviewer2"].post(f"/workflows/{rejected.pk}/reject", {})
    cancelled = submitted(people, "old-cancelled")
    cancellation.cancel(cancelled, by=people["agent"], reason="gone")
    columns = ("workflow_id", "team_id", "outcome", "reviewer_key", "actor", "entered_review_at", "revision")
    written = sorted(DecisionRecord.objects.values_list(*columns))
    actions_written = sorted(DecisionAction.objects.values_list("record__workflow_id", "action", "outcome"))
    DecisionRecord.objects.all().delete()
    backfill(django_apps, None)
    assert sorted(DecisionRecord.objects.values_list(*columns)) == written
    assert sorted(DecisionAction.objects.values_list("record__workflow_id", "action", "outcome")) == actions_written
    for row in DecisionRecord.objects.all():
        # The audit event's time, written in the same transaction as the move: within a moment of it.
        assert abs((row.decided_at - Workflow.objects.get(pk=row.workflow_id).updated_at).total_seconds()) < 1
