"""Operators settle steps whose outcome is in doubt, with evidence.

A step is IN_DOUBT when an effect may have happened and the system cannot
tell (no lookup, not idempotent, or verification failed). Only a person who
looked at the other system can say; their decision and reason are audited.

No single person completes a decision chain (docs/explanation/decisions.md#bound-decisions): when the step is
said to have happened and a later step of its lane takes a value from its
result by `$from`, that result is what the rest of the run acts on, so it
takes effect only once a second person (a reviewer or an operator, not the
one who gave it) confirms it. Until then the answer waits on the step
(`Step.proposed_resolution`, audited `step.resolution_proposed`): the step
stays IN_DOUBT and the workflow NEEDS_ATTENTION, so no later step is made
ready and none runs. The confirmation (`confirm`, audited
`step.resolution_confirmed`) names the answer it confirms by its digest
and applies it as the resolution would have. Any other answer takes effect
at once: "it did not happen" (the step runs again), "compensate" (a
reviewer still authorizes the undo), and a result no later step reads. A
new answer while one waits replaces it.
"""

from django.db import transaction
from django.utils import timezone

from workflows import persons, queue, roles
from workflows.audit import journal
from workflows.audit.redaction import CredentialRefused, credential_fields, refuse_credentials
from workflows.engine import compensating, references
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, WrongState
from workflows.models import Step, Workflow
from workflows.operations import compensation
from workflows.reasons import clean_reason
from workflows.states import FINISHED_STEP, AttemptStatus, StepStatus, WorkflowStatus

HAPPENED = "happened"
NOT_HAPPENED = "not_happened"
# It happened, and it must be undone: record it, stop the run, and request a
# compensation that a reviewer still has to authorize.
COMPENSATE = "compensate"
DECISIONS = (HAPPENED, NOT_HAPPENED, COMPENSATE)


class ResolutionChanged(WrongState):
    """The answer awaiting confirmation is no longer the one the confirmer saw."""

    code = "resolution_changed"


def resolve(step: Step, *, by, decision: str, reason: str, external_ref: str = "", result: dict | None = None) -> Step:
    """`happened`: record the operator's evidence and go on as if the call had
    answered (once confirmed, when a later step reads the result).
    `not_happened`: put the step back in line (same operation key)."""
    if not roles.is_operator(by):
        raise NotAllowed("Only operators can resolve in-doubt steps.")
    step.workflow.require_visible_to(by)
    reason = clean_reason(reason)
    if decision not in DECISIONS:
        message = f"Decision must be one of {', '.join(DECISIONS)}."
        raise DomainError(message, fields={"decision": message})
    external_ref = (external_ref or "").strip()[:200]
    refuse_credentials(external_ref=external_ref)
    if refused := credential_fields(result or {}, "result"):
        raise CredentialRefused(refused)
    if decision in (HAPPENED, COMPENSATE) and not external_ref:
        message = "Say where it happened: the external reference is the evidence."
        raise DomainError(message, fields={"external_ref": message})
    with transaction.atomic():
        locked = _lock_in_doubt(step)
        if decision == COMPENSATE and locked.lane:
            raise DomainError("An undo step cannot itself be compensated; say whether it happened.")
        evidence = {"decision": decision, "reason": reason, "external_ref": external_ref}
        workflow = Workflow.objects.select_for_update().get(pk=locked.workflow_id)
        readers = references.readers_of(locked) if decision == HAPPENED else []
        if readers:
            _propose(locked, workflow, by=by, evidence=evidence, result=result, readers=readers)
        else:
            _settle(locked, workflow, by=by, evidence=evidence, result=result, verb="step.resolved")
    locked.refresh_from_db()
    return locked


def confirm(step: Step, *, by, reason: str, digest: str) -> Step:
    """A second person confirms the answer awaiting confirmation (the one
    whose `digest` they saw), which then takes effect: the step completes
    with its result and the run goes on."""
    if not (roles.is_reviewer(by) or roles.is_operator(by)):
        raise NotAllowed("Only reviewers and operators can confirm a resolution.")
    step.workflow.require_visible_to(by)
    reason = clean_reason(reason)
    with transaction.atomic():
        locked = _lock_in_doubt(step)
        if locked.proposed_resolution is None:
            raise WrongState(f"Step {locked.key} has no resolution awaiting confirmation.")
        if persons.same(locked.proposed_by, by):
            raise NotAllowed("You gave this answer: a second person confirms it.")
        if digest != locked.proposal_digest():
            raise ResolutionChanged("The answer awaiting confirmation changed since you saw it: look at it again.")
        proposal = locked.proposed_resolution
        evidence = {
            "decision": proposal["decision"],
            "reason": proposal["reason"],
            "external_ref": proposal["external_ref"],
            "resolved_by": locked.proposed_by.get_username(),
            "confirmation_reason": reason,
        }
        workflow = Workflow.objects.select_for_update().get(pk=locked.workflow_id)
        _settle(locked, workflow, by=by, evidence=evidence, result=proposal["result"], verb="step.resolution_confirmed")
    locked.refresh_from_db()
    return locked


def _lock_in_doubt(step: Step) -> Step:
    locked = Step.objects.select_for_update(of=("self",)).select_related("workflow", "proposed_by").get(pk=step.pk)
    if locked.status != StepStatus.IN_DOUBT:
        raise WrongState(f"The step is {locked.status}, not in doubt.")
    return locked


def _propose(step: Step, workflow: Workflow, *, by, evidence: dict, result, readers: list[str]) -> None:
    """Keep the answer on the step for a second person; nothing else moves."""
    if workflow.restored_at:
        raise WrongState("This workflow is archived: it was restored read-only and cannot change.")
    replaced = step.proposed_by.get_username() if step.proposed_by_id else None
    # The result exactly as the later steps will read it: what the confirmer sees and binds.
    proposal = {**evidence, "result": _result(step, result, evidence["external_ref"]), "at": timezone.now().isoformat()}
    Step.objects.filter(pk=step.pk).update(proposed_resolution=proposal, proposed_by=by, updated_at=timezone.now())
    journal.append(
        actor=by,
        verb="step.resolution_proposed",
        obj_type="step",
        obj_id=step.pk,
        workflow_id=workflow.pk,
        data={**evidence, "awaiting_confirmation": True, "read_by": readers, "replaces": replaced},
    )


def _settle(step: Step, workflow: Workflow, *, by, evidence: dict, result, verb: str) -> None:
    """The answer takes effect: the attempts in doubt are settled, the step
    completes or goes back in line, and the workflow goes on."""
    decision, external_ref = evidence["decision"], evidence["external_ref"]
    for attempt in step.attempts.filter(status__in=[AttemptStatus.REQUESTED, AttemptStatus.UNKNOWN]):
        move(
            attempt,
            AttemptStatus.RECONCILED,
            actor=by,
            verb="attempt.resolved",
            finished_at=attempt.finished_at or timezone.now(),
            data=evidence,
        )
    settled = {"proposed_resolution": None, "proposed_by": None, "failure_class": ""}
    if decision in (HAPPENED, COMPENSATE):
        move(
            step,
            StepStatus.VERIFYING,
            actor=by,
            verb=verb,
            external_ref=external_ref,
            result=_result(step, result, external_ref),
            data=evidence,
            **settled,
        )
        move(
            step,
            StepStatus.COMPLETE,
            actor=by,
            verb="step.complete",
            lease_expires_at=None,
            data={"verified_by": "operator evidence"},
        )
        Step.objects.ready_after([step])
    else:
        last = step.attempts.order_by("-number").values_list("number", flat=True).first() or 0
        move(
            step,
            StepStatus.PENDING,
            actor=by,
            verb=verb,
            retry_base=last,
            next_attempt_at=timezone.now(),
            data=evidence,
            **settled,
        )
    if step.lane:
        _resume_compensation(workflow, step, by, decision, evidence)
    elif decision == COMPENSATE:
        if workflow.status == WorkflowStatus.NEEDS_ATTENTION:
            move(workflow, WorkflowStatus.FAILED, actor=by, verb="workflow.stopped", data=evidence)
        compensation.request(workflow, by=by, reason=evidence["reason"])
    elif workflow.status == WorkflowStatus.NEEDS_ATTENTION:
        if not workflow.steps.filter(lane=0).exclude(status__in=FINISHED_STEP).exists():
            move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=evidence)
            move(workflow, WorkflowStatus.COMPLETE, actor=by)
        elif not workflow.steps.filter(status=StepStatus.IN_DOUBT).exists():
            move(workflow, WorkflowStatus.RUNNING, actor=by, verb="workflow.resumed", data=evidence)
            queue.wake(workflow)


def _result(step: Step, result: dict | None, external_ref: str) -> dict:
    """The result an answer that it happened gives the step: the one the
    operator saw, else the one recorded, else the evidence."""
    return result if result else (step.result or {"external_ref": external_ref})


def _resume_compensation(workflow, step, by, decision, evidence) -> None:
    if step.compensation_run.steps.filter(status=StepStatus.IN_DOUBT).exists():
        return
    compensation.resume(workflow, step, by=by, **{k: evidence[k] for k in ("decision", "reason", "external_ref")})
    if decision == HAPPENED:
        compensating.step_complete(workflow, step)
    queue.wake(workflow)
