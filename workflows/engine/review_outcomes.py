"""How each plan left review, written where its status moves
(`transitions.move` and `move_many`): the one place every ending passes, an
approval by the API, the console, a link or a chat, a rejection, an expiry
or a cancellation alike, in the same transaction (docs/guides/analytics.md).

Time to decision runs from the plan entering review, its submission
(`Workflow.created_at`), to the move: a revision does not restart it, since
the agent has been waiting all along.
"""

from django.contrib.auth.models import AbstractBaseUser

from workflows import persons
from workflows.audit import journal
from workflows.models import DecisionAction, DecisionRecord, Outcome, Workflow
from workflows.states import WorkflowStatus

OUTCOMES = {
    WorkflowStatus.APPROVED: Outcome.APPROVED,
    WorkflowStatus.REJECTED: Outcome.REJECTED,
    WorkflowStatus.EXPIRED: Outcome.EXPIRED,
    WorkflowStatus.CANCELLED: Outcome.CANCELLED,
}
# Endings a person decides: only these name a reviewer.
DECIDED = (Outcome.APPROVED, Outcome.REJECTED)


def ends_review(model, current: str, target: str) -> bool:
    return model is Workflow and current == WorkflowStatus.PLANNED and target in OUTCOMES


def record(workflows: list[Workflow], target: str, actor, decided_at) -> None:
    """One `DecisionRecord` per plan leaving review (and its actions' rows),
    inside the caller's transaction. An approval counts as a person's when
    the actor is an account; anything else (a policy, `system`) leaves no
    reviewer, which is what the analytics count as `auto`."""
    outcome = OUTCOMES[target]
    person = isinstance(actor, AbstractBaseUser) and outcome in DECIDED
    reviewer_key = persons.key(actor) if person else ""
    name = journal.actor_name(actor)
    records = [
        DecisionRecord(
            workflow_id=workflow.pk,
            team_id=workflow.team_id,
            outcome=outcome,
            reviewer_key=reviewer_key,
            actor=name,
            entered_review_at=workflow.created_at,
            decided_at=decided_at,
            seconds=max((decided_at - workflow.created_at).total_seconds(), 0.0),
            revision=workflow.revision,
        )
        for workflow in workflows
    ]
    # PostgreSQL and SQLite (3.35+) give the new rows' keys back: no read for them.
    DecisionRecord.objects.bulk_create(records)
    DecisionAction.objects.bulk_create(
        DecisionAction(
            record_id=rec.pk,
            action=action,
            team_id=rec.team_id,
            outcome=rec.outcome,
            reviewer_key=rec.reviewer_key,
            actor=rec.actor,
            decided_at=rec.decided_at,
            seconds=rec.seconds,
        )
        for workflow, rec in zip(workflows, records)
        for action in sorted({step["action"] for step in workflow.plan})
    )
