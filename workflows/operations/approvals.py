"""Reviewers' decisions on plans. Four eyes: never the submitter's own.

A plan runs once enough distinct reviewers approved it (the strictest
`approvals_required` among its actions). Every decision is sealed with the
audit key (`binding.seal`): only sealed approvals of the plan as stored
count, and an approval also seals the digests of the effect previews the
reviewer was shown, which must still be the current ones. A step blocked by
the policy recheck (or by a binding preview that changed) needs a fresh
approval of the same plan to go on.
"""

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal
from uuid import UUID

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from workflows import actions, queue
from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.chat import marks as chat
from workflows.engine import binding, expiry, locks, policy, previews
from workflows.engine.transitions import move, move_many
from workflows.errors import DomainError, PreviewChanged, PreviewPending, WrongState
from workflows.models import Approval, Attempt, Step, Workflow
from workflows.operations import deciding, delegation
from workflows.operations.deciding import Seen
from workflows.states import PreviewState, StepStatus, WorkflowStatus


def approve(workflow: Workflow | UUID, *, by, seen: Seen, comment: str = "") -> Workflow:
    """Approve the plan as `seen` (its revision, hash and the previews shown:
    `{step key: digest}`, `{}` when none were): refused unless that is still
    what stands (`deciding`). Also a fresh approval of a plan a policy
    recheck blocked, which lets its blocked steps go on."""
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked, steps = locks.plan_and_steps(getattr(workflow, "pk", workflow))
        expired = locked.status == WorkflowStatus.PLANNED and expiry.expire_one(locked)
        if not expired:
            _approve(locked, steps, by, seen, comment)
    if expired:
        raise WrongState("The plan's deadline passed: it expired before it was approved.")
    return locked


def _approve(locked: Workflow, steps: list[Step], by, seen: Seen, comment: str) -> None:
    plan_policies = policy.plan_rules(locked)
    me = deciding.eligible_reviewer(
        locked, by, "approve this plan", approving=True, editors_too=True, plan_policies=plan_policies
    )
    blocked = [step for step in steps if step.status == StepStatus.BLOCKED]
    if not (locked.status == WorkflowStatus.PLANNED or (locked.status == WorkflowStatus.FAILED and blocked)):
        raise WrongState(f"The workflow is {locked.status}, not awaiting an approval.")
    deciding.current_plan(locked, seen)
    shown = _previews_shown(steps, seen.preview_digests)
    counted = {approval.person for approval in policy.valid_approvals(locked, plan_policies)}
    if locked.status == WorkflowStatus.PLANNED and me in counted:
        raise WrongState("You have already approved this revision (four eyes count people, not accounts).")
    binding.seal(
        Approval(
            workflow=locked,
            reviewer=by,
            decision=Approval.Decision.APPROVE,
            comment=comment,
            plan_hash=locked.plan_hash,
            revision=locked.revision,
            preview_digests=shown,
        )
    ).save()
    required, have = policy.approvals_required(plan_policies), len(counted | {me})
    data = {
        "comment": comment,
        "plan_hash": locked.plan_hash,
        "revision": locked.revision,
        "preview_digests": shown,
        "approvals": have,
        "required": required,
    }
    data = delegation.stamped(data, locked, by)
    if have < required:
        journal.append(
            actor=by,
            verb="workflow.approval_recorded",
            obj_type="workflow",
            obj_id=locked.pk,
            workflow_id=locked.pk,
            data=data,
        )
        chat.changed([locked.pk])
        return
    if locked.status == WorkflowStatus.PLANNED:
        move(locked, WorkflowStatus.APPROVED, actor=by, verb="workflow.approved", data=data)
        first = next((step for step in steps if step.status == StepStatus.PENDING), None)
        if first is not None:  # the first step is ready; each next one when the one before completes
            Step.objects.filter(pk=first.pk).update(next_attempt_at=timezone.now())
    else:
        _unblock(locked, blocked, by, data)
    queue.wake(locked)


def _previews_shown(steps: list[Step], shown: dict[str, str] | None) -> dict[str, str]:
    """The digests this approval binds: the current previews of the plan's
    steps, which must be those the reviewer was shown (named whenever the
    plan has a preview). An action that waits for its preview (one it
    requires, or one carrying the request it will send) refuses approval
    until a step yet to run has one: a request nobody was shown is never
    bound, so never sent."""
    current = {step.key: step.preview_digest for step in steps if step.preview_state == PreviewState.READY}
    if shown is None and current:
        deciding.require(Seen(), "preview_digests")
    for step in steps:
        action = actions.find(step.action)
        if (
            action is not None
            and action.waits_for_preview
            and step.status in (StepStatus.PENDING, StepStatus.BLOCKED)
            and step.preview_state in (PreviewState.PENDING, PreviewState.FAILED)
        ):
            waiting = {"step": step.key, "preview_state": step.preview_state}
            if step.preview_state == PreviewState.PENDING:
                raise PreviewPending(
                    f"Step {step.key} ({step.action}) cannot be approved before its preview "
                    "exists, and a worker has yet to take it: wait a moment and look again.",
                    details=waiting,
                )
            raise PreviewPending(
                f"Step {step.key} ({step.action}) cannot be approved before its preview exists, "
                f"and taking it failed ({step.preview_failure_class}): take the previews again, "
                "or reject the plan.",
                details=waiting,
            )
    if shown is not None and shown != current:
        raise PreviewChanged(
            "The effect previews changed since you looked: review the new previews, then decide again."
        )
    return current


def retake_previews(workflow: Workflow, *, by) -> Workflow:
    """A reviewer asks a worker to take the previews of the steps yet to
    run again (one failed, or the remote system changed since): they are
    pending until it has, and the new ones are what approvals bind."""
    with transaction.atomic():
        locked = locks.plan(workflow.pk)
        deciding.eligible_reviewer(locked, by, "ask for this plan's previews", approving=False, editors_too=False)
        blocked = locked.steps.filter(status=StepStatus.BLOCKED, lane=0).exists()
        if not (locked.status == WorkflowStatus.PLANNED or (locked.status == WorkflowStatus.FAILED and blocked)):
            raise WrongState(f"The workflow is {locked.status}, not awaiting an approval.")
        again = list(
            locked.steps.filter(
                lane=0,
                status__in=[StepStatus.PENDING, StepStatus.BLOCKED],
                preview_state__in=[PreviewState.READY, PreviewState.FAILED],
            )
            .order_by("position")
            .values_list("key", flat=True)
        )
        if not again:
            raise WrongState("No step of this plan has a preview to take again.")
        Step.objects.filter(workflow=locked, key__in=again).update(preview_state=PreviewState.PENDING)
        Workflow.objects.filter(pk=locked.pk).update(previews_due_at=timezone.now())
        journal.append(
            actor=by,
            verb="workflow.previews_requested",
            obj_type="workflow",
            obj_id=locked.pk,
            workflow_id=locked.pk,
            data={"steps": again},
        )
        chat.changed([locked.pk])
        queue.enqueue(previews.TASK, name="previews")
    return locked


def _unblock(workflow: Workflow, blocked: list[Step], by, data: dict) -> None:
    """The blocked steps (locked with the plan) go on, their retries counted
    from their last attempt: one read and one update for them all."""
    last = dict(
        Attempt.objects.filter(step__in=blocked)
        .values("step_id")
        .annotate(last=Max("number"))
        .values_list("step_id", "last")
    )
    move_many(
        blocked,
        StepStatus.PENDING,
        actor=by,
        verb="step.unblocked",
        locked=True,
        each=lambda step: {"retry_base": last.get(step.pk, 0)},
        data={"reason": "fresh approval"},
        failure_class="",
        next_attempt_at=timezone.now(),
    )
    move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.reapproved", data=data)


def reject(workflow: Workflow | UUID, *, by, seen: Seen, comment: str = "") -> Workflow:
    """Reject the plan as `seen` (its revision and hash). An editor of a
    revision may reject it; its submitter may not decide it at all."""
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked = locks.plan(getattr(workflow, "pk", workflow))
        deciding.eligible_reviewer(locked, by, "reject this plan", approving=False, editors_too=False)
        if locked.status != WorkflowStatus.PLANNED:
            raise WrongState(f"The workflow is {locked.status}, not awaiting review.")
        deciding.current_plan(locked, seen)
        binding.seal(
            Approval(
                workflow=locked,
                reviewer=by,
                decision=Approval.Decision.REJECT,
                comment=comment,
                plan_hash=locked.plan_hash,
                revision=locked.revision,
            )
        ).save()
        move(
            locked,
            WorkflowStatus.REJECTED,
            actor=by,
            verb="workflow.rejected",
            data=delegation.stamped(
                {"comment": comment, "revision": locked.revision, "plan_hash": locked.plan_hash}, locked, by
            ),
        )
    return locked


# One bulk call decides at most this many plans (docs/guides/reviewers.md#deciding-several-plans-at-once).
MAX_AT_ONCE = 100


@dataclass(frozen=True)
class Decision:
    """One plan's decision among several: approve or reject `workflow` as `seen`."""

    workflow: UUID
    decision: Literal["approve", "reject"]
    seen: Seen
    comment: str = ""


class BatchRefused(DomainError):
    """A bulk call refused whole: nothing in it was decided."""

    code = "invalid"


def decide_each(decisions: Sequence[Decision], *, by) -> list[DomainError | None]:
    """Decide each plan on its own, in order, by `approve` or `reject`: their
    checks under the plan's lock, their transaction, their audit event. None
    where the decision was recorded, else the error that refused it (which
    changed nothing); one refused never undoes another. None, more than
    MAX_AT_ONCE, or a plan named twice is refused whole, before anything is
    decided: a second decision on one plan would be judged against the first."""
    if not decisions or len(decisions) > MAX_AT_ONCE:
        raise BatchRefused(
            f"Decide from 1 to {MAX_AT_ONCE} plans at once, not {len(decisions)}.",
            fields={"decisions": f"From 1 to {MAX_AT_ONCE} decisions."},
        )
    first: dict[UUID, int] = {}
    twice = {}
    for index, decision in enumerate(decisions):
        if first.setdefault(decision.workflow, index) != index:
            twice[f"decisions.{index}.workflow"] = f"This plan is named already (decisions.{first[decision.workflow]})."
    if twice:
        raise BatchRefused("Each plan is decided once per call: it is named more than once.", fields=twice)
    outcomes: list[DomainError | None] = []
    for decision in decisions:
        decide = approve if decision.decision == "approve" else reject
        try:
            decide(decision.workflow, by=by, seen=decision.seen, comment=decision.comment)
        except DomainError as exc:
            outcomes.append(exc)
        else:
            outcomes.append(None)
    return outcomes
