"""Decision rows of a known shape, written as `review_outcomes` writes them,
for the analytics' exact numbers (the paths that write them are tested on
their own)."""

from datetime import timedelta
from uuid import uuid4

from django.utils import timezone

from workflows import teams
from workflows.models import DecisionAction, DecisionRecord, Team


def decided(
    seconds: float,
    *,
    outcome: str = "approved",
    team: Team | None = None,
    reviewer: str = "user:1",
    actor: str = "reviewer",
    actions=("noop",),
    ago: timedelta = timedelta(hours=1),
) -> DecisionRecord:
    """A plan that left review `ago`, `seconds` after its submission."""
    team = team or teams.default_team()  # created again if a transactional test flushed it
    at = timezone.now() - ago
    record = DecisionRecord.objects.create(
        workflow_id=uuid4(),
        team=team,
        outcome=outcome,
        reviewer_key=reviewer if outcome in ("approved", "rejected") else "",
        actor=actor,
        entered_review_at=at - timedelta(seconds=seconds),
        decided_at=at,
        seconds=seconds,
    )
    for action in actions:
        DecisionAction.objects.create(
            record=record,
            action=action,
            team=team,
            outcome=record.outcome,
            reviewer_key=record.reviewer_key,
            actor=actor,
            decided_at=at,
            seconds=seconds,
        )
    return record


def team_of(name: str, *members) -> Team:
    team = Team.objects.create(name=name)
    team.members.add(*members)
    return team
