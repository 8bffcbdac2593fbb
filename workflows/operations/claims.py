"""Who is handling a plan: a reviewer claims it ("I'm on it"), releases it,
or hands it to another reviewer (docs/explanation/review.md#review).

A claim informs; it never blocks. Any reviewer may still decide a claimed
plan, and a claim lapses REVIEW_CLAIM_MINUTES after its holder last showed
activity on the plan (claimed it, or opened it), so a plan is never stuck
behind someone who went home. Lapsing is read from the clock, not swept:
`holder()` and the inbox filters compare `claimed_at` with the cutoff.
Claims exist while a plan awaits a decision (PLANNED, or FAILED with a step
blocked until a fresh approval). Every claim, release and assignment is
audited; a lapse is not an act of anyone's, so it is not.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.conf import settings
from django.contrib.auth import get_user_model
from django.db import transaction
from django.db.models import Q, QuerySet
from django.utils import timezone

from workflows import roles, teams
from workflows.audit import journal
from workflows.errors import DomainError, NotAllowed, WrongState
from workflows.models import Workflow
from workflows.operations import delegation
from workflows.states import StepStatus, WorkflowStatus

# A holder's activity renews the claim at most this often (a page view is a write then).
TOUCH_EVERY = timedelta(seconds=60)


def cutoff(now: datetime | None = None) -> datetime:
    """Claims whose holder was last active before this have lapsed."""
    return (now or timezone.now()) - timedelta(minutes=settings.REVIEW_CLAIM_MINUTES)


def awaiting_decision(workflow: Workflow) -> bool:
    return workflow.status == WorkflowStatus.PLANNED or (
        workflow.status == WorkflowStatus.FAILED and workflow.steps.filter(lane=0, status=StepStatus.BLOCKED).exists()
    )


def holder(workflow: Workflow, now: datetime | None = None):
    """The reviewer holding the plan now, or None (unclaimed, lapsed, or no
    longer awaiting a decision)."""
    current = workflow.claim(now)
    return current[0] if current else None


def expires_at(workflow: Workflow) -> datetime | None:
    current = workflow.claim()
    return current[1] if current else None


def held_by(queryset: QuerySet, user) -> QuerySet:
    return queryset.filter(claimed_by=user, claimed_at__gt=cutoff())


def unclaimed(queryset: QuerySet) -> QuerySet:
    return queryset.filter(Q(claimed_by__isnull=True) | Q(claimed_at__isnull=True) | Q(claimed_at__lte=cutoff()))


def _may_review(workflow: Workflow, user) -> bool:
    return roles.is_reviewer(user) and workflow.submitted_by_id != user.pk and teams.in_team(user, workflow.team_id)


def _locked(workflow: Workflow) -> Workflow:
    locked = Workflow.objects.select_for_update(of=("self",)).select_related("claimed_by").get(pk=workflow.pk)
    if not awaiting_decision(locked):
        raise WrongState(f"The workflow is {locked.status}, not awaiting a decision: there is nothing to claim.")
    return locked


def _held_elsewhere(locked: Workflow, by) -> str:
    return (
        f"{locked.claimed_by.get_username()} is handling this plan; they can release it or assign it to you, "
        f"or their claim lapses after {settings.REVIEW_CLAIM_MINUTES} minutes without activity. "
        "You can still decide it."
    )


def _hold(locked: Workflow, reviewer, *, by, verb: str, data: dict) -> None:
    """Inside the caller's transaction, on the locked plan: `reviewer` holds it
    from now (None: nobody does), audited as `verb` by `by`."""
    locked.claimed_by, locked.claimed_at = reviewer, timezone.now() if reviewer else None
    locked.save(update_fields=["claimed_by", "claimed_at"])
    journal.append(actor=by, verb=verb, obj_type="workflow", obj_id=locked.pk, workflow_id=locked.pk, data=data)


def claim(workflow: Workflow, *, by) -> Workflow:
    """`by` takes the plan ("I'm on it"). Claiming one's own claim again renews it."""
    if not _may_review(workflow, by):
        raise NotAllowed("Only a reviewer other than the plan's submitter can claim it.")
    with transaction.atomic():
        locked = _locked(workflow)
        current = holder(locked)
        if current is not None and current.pk != by.pk:
            raise WrongState(_held_elsewhere(locked, by))
        _hold(locked, by, by=by, verb="workflow.claimed", data={"renewed": current is not None})
    return locked


def release(workflow: Workflow, *, by) -> Workflow:
    """The holder lets the plan go back to everyone."""
    if not roles.is_reviewer(by):
        raise NotAllowed("Only reviewers hold plans.")
    with transaction.atomic():
        locked = _locked(workflow)
        current = holder(locked)
        if current is None:
            raise WrongState("Nobody holds this plan: there is no claim to release.")
        if current.pk != by.pk:
            raise NotAllowed(
                f"Only {current.get_username()}, who holds this plan, can release it; "
                f"their claim lapses after {settings.REVIEW_CLAIM_MINUTES} minutes without activity."
            )
        _hold(locked, None, by=by, verb="workflow.claim_released", data={})
    return locked


def assign(workflow: Workflow, *, by, to: str) -> Workflow:
    """Hand the plan to another reviewer: by a reviewer, when the plan is
    unclaimed or is theirs. `to` is a username; while they are away, the plan
    goes to their delegate, if the delegate may take it (docs/explanation/review.md#delegation)."""
    if not _may_review(workflow, by):
        raise NotAllowed("Only a reviewer other than the plan's submitter can assign it.")
    target = get_user_model().objects.filter(**{get_user_model().USERNAME_FIELD: to}).first() if to else None
    if target is None or not target.is_active or not roles.is_reviewer(target):
        raise DomainError("Assign the plan to an active reviewer.", fields={"to": "Not an active reviewer."})
    if not teams.in_team(target, workflow.team_id):
        raise DomainError(
            "Assign the plan to a reviewer of its team.", fields={"to": "Not a reviewer of the plan's team."}
        )
    if target.pk == workflow.submitted_by_id:
        raise DomainError(
            "The plan's submitter cannot review it.", fields={"to": "The plan's submitter cannot review it."}
        )
    named, target = target, delegation.stand_in(target, assignees(workflow))
    data = {"to": target.get_username()}
    if target.pk != named.pk:
        data["delegated_from"] = named.get_username()
    with transaction.atomic():
        locked = _locked(workflow)
        current = holder(locked)
        if current is not None and current.pk != by.pk:
            raise WrongState(_held_elsewhere(locked, by))
        _hold(
            locked,
            target,
            by=by,
            verb="workflow.assigned",
            data={**data, "from": current.get_username() if current else None},
        )
    return locked


def assignees(workflow: Workflow) -> QuerySet:
    """The reviewers a plan can be handed to: active, of its team, not its submitter."""
    return (
        get_user_model()
        .objects.filter(teams.members_q(workflow.team_id), is_active=True, groups__name=roles.REVIEWERS)
        .exclude(pk=workflow.submitted_by_id)
        .order_by(get_user_model().USERNAME_FIELD)
        .distinct()
    )


def touch(workflow: Workflow, user) -> None:
    """The holder opened the plan: their claim runs from now. At most one
    write a minute; nothing for anyone else."""
    now = timezone.now()
    if workflow.claimed_by_id != user.pk or workflow.claim(now) is None or workflow.claimed_at > now - TOUCH_EVERY:
        return
    if Workflow.objects.filter(pk=workflow.pk, claimed_by=user, claimed_at=workflow.claimed_at).update(claimed_at=now):
        workflow.claimed_at = now
