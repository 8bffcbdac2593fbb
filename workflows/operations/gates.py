"""Reviewers' decisions at a gate (docs/explanation/review.md#review): approve, once per reviewer,
binding the plan's revision and the results of the steps before the gate
they were shown; the run goes on once the gate's approvals are in, counted
by person. Reject: the workflow ends REJECTED, and its completed steps can
then be compensated through the usual authorized path. The plan's authors
(its submitter, its editors) never approve its gates (`deciding`).
"""

from __future__ import annotations

from uuid import UUID

from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows import queue
from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.chat import marks as chat
from workflows.db import canonical_json
from workflows.engine import binding, choices, gates, locks
from workflows.engine.transitions import move
from workflows.errors import DomainError, WrongState
from workflows.models import GateApproval, Step, Workflow
from workflows.operations import deciding, delegation
from workflows.operations.deciding import Seen
from workflows.states import StepStatus, WorkflowStatus


class ResultsChanged(WrongState):
    """The results before the gate are no longer those the reviewer was shown."""

    code = "results_changed"


class DecisionInvalid(DomainError):
    """A choice or input the gate does not take (400 with `fields`)."""

    code = "invalid"


class DecisionDiffers(WrongState):
    """At a typed gate, the first approver's choice and input stand: the
    others approve those, or reject (`details["current"]` names them)."""

    code = "decision_differs"


def _typed(step: Step, counted: list[GateApproval], choice, given_input) -> dict | None:
    """The checked `{"choice", "input"}` of an approval at a typed gate
    (docs/explanation/review.md#typed-decisions), None at a plain one: valid for the gate,
    and the same as the first counted approver's."""
    if not choices.typed(step.gate) and choice is None and given_input is None:
        return None
    if errors := choices.decision_errors(step.gate or {}, choice, given_input):
        named = "; ".join(f"{path}: {message}" for path, message in errors.items())
        raise DecisionInvalid(f"The decision is not valid for this gate: {named}", fields=errors)
    decided = {"choice": choice or None, "input": given_input}
    standing = gates.standing(counted)
    if standing is not None and canonical_json(standing) != canonical_json(decided):
        raise DecisionDiffers(
            "Another approver already gave this gate's choice and input: approve those, or reject.",
            details={"current": standing},
        )
    return decided


def _waiting(workflow_id, step_key: str, by, what: str, *, approving: bool) -> tuple[Workflow, Step, str]:
    """Inside a transaction: the plan's rows locked (`locks`), its decider
    found eligible (their person key), and the gate's step, which must be
    the one the workflow waits at."""
    locked = locks.plan(workflow_id)
    me = deciding.eligible_reviewer(locked, by, what, approving=approving, editors_too=approving)
    step = locked.steps.filter(key=step_key, lane=0).first()
    if step is None or not step.gate:
        raise WrongState(f"This plan has no gate at step {step_key!r}.")
    if locked.status != WorkflowStatus.WAITING_GATE or step.status != StepStatus.WAITING_GATE:
        raise WrongState(
            f"The workflow is {locked.status} and step {step_key} is {step.status}: it is not waiting at this gate."
        )
    return locked, step, me


def _record(
    workflow: Workflow, step: Step, by, decision: str, comment: str, shown: str | None, typed: dict | None = None
) -> GateApproval:
    """The decision, once its decider is found eligible: the results before
    the gate must be those they were shown (named whenever there are any)."""
    digest = gates.results_digest(step)
    if shown is None and gates.results_shown(step):
        deciding.require(Seen(), "results_digest")
    if shown is not None and shown != digest:
        raise ResultsChanged("The results before this gate changed since you looked: look again, then decide.")
    approval = binding.seal(
        GateApproval(
            workflow=workflow,
            step=step,
            reviewer=by,
            decision=decision,
            comment=comment,
            plan_hash=workflow.plan_hash,
            results_digest=digest,
            choice=(typed or {}).get("choice") or "",
            input=(typed or {}).get("input"),
            created_at=timezone.now(),
        )
    )
    try:
        with transaction.atomic():
            approval.save()
            return approval
    except IntegrityError:
        raise WrongState("You have already decided at this gate.") from None


def approve(
    workflow: Workflow | UUID,
    step_key: str,
    *,
    by,
    seen: Seen,
    comment: str = "",
    choice: str | None = None,
    given_input=None,
) -> Workflow:
    """Approve the gate as `seen`: the plan's revision and hash, and the
    digest of the results before the gate (`gates.results_digest`) the
    reviewer was shown; refused (409) when any changed since. At a typed
    gate, with its `choice` and `given_input` (`_typed`)."""
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked, step, me = _waiting(
            getattr(workflow, "pk", workflow), step_key, by, "approve a gate of this plan", approving=True
        )
        deciding.current_plan(locked, seen)
        valid = gates.valid_approvals(step, locked)
        counted = {approval.person for approval in valid}
        if me in counted:
            raise WrongState("You have already decided at this gate (four eyes count people, not accounts).")
        typed = _typed(step, valid, choice, given_input)
        _record(locked, step, by, GateApproval.Decision.APPROVE, comment, seen.results_digest, typed)
        have = len(counted | {me})
        need = gates.required(step)
        data = {
            "step": step.key,
            "comment": comment,
            "approvals": have,
            "required": need,
            "results_digest": gates.results_digest(step),
            **(typed or {}),
        }
        data = delegation.stamped(data, locked, by)
        if have < need:
            journal.append(
                actor=by,
                verb="gate.approval_recorded",
                obj_type="step",
                obj_id=step.pk,
                workflow_id=locked.pk,
                data=data,
            )
            chat.changed([locked.pk])
            return locked
        now = timezone.now()
        move(
            step,
            StepStatus.PENDING,
            actor=by,
            verb="gate.opened",
            data=data,
            gate_opened_at=now,
            next_attempt_at=now,
            gate_decision=typed,
        )
        move(locked, WorkflowStatus.RUNNING, actor=by, verb="workflow.gate_approved", data=data)
        queue.wake(locked)
    return locked


def reject(workflow: Workflow | UUID, step_key: str, *, by, seen: Seen, comment: str = "") -> Workflow:
    """The workflow ends REJECTED at the gate; the gated step never runs."""
    refuse_credentials(comment=comment)
    with transaction.atomic():
        locked, step, _ = _waiting(
            getattr(workflow, "pk", workflow), step_key, by, "reject a gate of this plan", approving=False
        )
        deciding.current_plan(locked, seen)
        _record(locked, step, by, GateApproval.Decision.REJECT, comment, seen.results_digest)
        data = delegation.stamped({"step": step.key, "comment": comment}, locked, by)
        move(step, StepStatus.PENDING, actor=by, verb="gate.rejected", data=data)
        move(locked, WorkflowStatus.REJECTED, actor=by, verb="workflow.rejected", data=data)
    return locked
