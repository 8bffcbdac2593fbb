"""Compensation: undo is a new, explicit, authorized business action.

An operator requests it with a reason; a reviewer other than the requester
authorizes (or declines) it. It then runs as new steps in the workflow's
next lane, in reverse order of completion, each with its own operation key,
through the same engine as forward steps: the same checkpoints, retries,
dead letters, recovery and failpoints. Completed effects that cannot be
undone are listed on the request, never skipped silently.
"""

from datetime import timedelta
from uuid import UUID

from django.conf import settings
from django.db import IntegrityError, transaction
from django.db.models import Max
from django.utils import timezone

from workflows import actions, persons, queue, roles
from workflows.audit import journal
from workflows.audit.redaction import was_redacted
from workflows.chat import marks as chat
from workflows.engine import binding, compensating
from workflows.engine.transitions import move
from workflows.errors import DomainError, NotAllowed, StaleRevision, WrongState
from workflows.models import Compensation, Step, Workflow, operation_key_for
from workflows.operations import deciding
from workflows.operations.deciding import Seen
from workflows.reasons import clean_reason
from workflows.states import CompensationStatus, StepStatus, WorkflowStatus

COMPENSABLE_WORKFLOW = (
    WorkflowStatus.COMPLETE,
    WorkflowStatus.FAILED,
    WorkflowStatus.NEEDS_ATTENTION,
    WorkflowStatus.COMPENSATION_FAILED,
    WorkflowStatus.CANCELLED,
    WorkflowStatus.REJECTED,
    WorkflowStatus.EXPIRED,
)
OPEN = (CompensationStatus.REQUESTED, CompensationStatus.AUTHORIZED, CompensationStatus.RUNNING)
IRREVERSIBLE_WHY = "{action} cannot be undone: its effect stays in place and must be handled outside the system."
LANE_GAP = 1000


class CompensationInvalid(DomainError):
    code = "invalid"


def undo_of(step: Step) -> tuple[str, dict] | None:
    """The action and concrete args that undo a completed step, or None when
    it is irreversible. A plan step may name its own compensation."""
    if step.compensation:
        spec = step.compensation
        return spec["action"], _resolve(spec.get("args") or {}, step)
    try:
        action = actions.get(step.action)
    except KeyError:
        return None
    if action.irreversible:
        return None
    return action.compensation, action.compensation_args(step.args, step.result or {})


def _resolve(args, step: Step):
    """Resolve {"$from": "<key>.result.<field>"} against completed results now,
    so the undo runs with concrete values."""
    results = dict(
        Step.objects.filter(workflow_id=step.workflow_id, lane=0).exclude(result=None).values_list("key", "result")
    )

    def walk(value):
        if actions.is_reference(value):
            source, _, path = value[actions.FROM].partition(".result.")
            found = results.get(source)
            for part in path.split(".") if path else []:
                found = found.get(part) if isinstance(found, dict) else None
            if found is None:
                raise CompensationInvalid(
                    f"compensation of {step.key} refers to {value[actions.FROM]}, which has no value"
                )
            if was_redacted(found):
                raise CompensationInvalid(
                    f"compensation of {step.key} refers to {value[actions.FROM]}, "
                    f"which was redacted when it was recorded"
                )
            return found
        if isinstance(value, dict):
            return {k: walk(v) for k, v in value.items()}
        if isinstance(value, list):
            return [walk(v) for v in value]
        return value

    return walk(args)


def request(workflow: Workflow, *, by, reason: str, step_keys: list[str] | None = None) -> Compensation:
    """Record an operator's request to undo completed steps (all, or a subset)."""
    if not roles.is_operator(by):
        raise NotAllowed("Only operators can request a compensation.")
    workflow.require_visible_to(by)
    reason = clean_reason(reason)
    with transaction.atomic():
        locked = Workflow.objects.select_for_update().get(pk=workflow.pk)
        if locked.restored_at:
            raise WrongState("This workflow is archived: it was restored read-only and cannot be compensated.")
        if locked.status not in COMPENSABLE_WORKFLOW:
            raise WrongState(f"A {locked.status} workflow cannot be compensated now.")
        _refuse_in_flight(locked)
        completed = list(locked.steps.filter(lane=0, status=StepStatus.COMPLETE).order_by("-position"))
        if step_keys is not None:
            if not step_keys:
                raise CompensationInvalid("Choose at least one completed step, or leave the choice out for all.")
            unknown = set(step_keys) - {s.key for s in completed}
            if unknown:
                raise CompensationInvalid(f"Not completed steps of this workflow: {', '.join(sorted(unknown))}.")
            completed = [s for s in completed if s.key in step_keys]
        if not completed:
            raise CompensationInvalid("There is no completed step to compensate.")
        lane = (locked.compensations.aggregate(top=Max("lane"))["top"] or 0) + 1
        plan, irreversible = [], []
        for step in completed:  # reverse order of completion
            undo = undo_of(step)
            if undo is None:
                irreversible.append(
                    {"key": step.key, "action": step.action, "why": IRREVERSIBLE_WHY.format(action=step.action)}
                )
                continue
            action, args = undo
            plan.append({"compensates": step.key, "key": f"{step.key}~undo{lane}", "action": action, "args": args})
        try:
            with transaction.atomic():
                comp = Compensation.objects.create(
                    workflow=locked, lane=lane, reason=reason, plan=plan, irreversible=irreversible, requested_by=by
                )
        except IntegrityError:
            raise WrongState("This workflow already has a compensation awaiting a decision or running.") from None
        journal.append(
            actor=by,
            verb="compensation.requested",
            obj_type="compensation",
            obj_id=comp.pk,
            workflow_id=locked.pk,
            data={
                "reason": reason,
                "steps": [p["compensates"] for p in plan],
                "irreversible": [i["key"] for i in irreversible],
            },
        )
        chat.opened(locked, "compensation", str(comp.pk))
    return comp


def _refuse_in_flight(workflow: Workflow) -> None:
    """A cancelled run may still have an effect in flight: its outcome is
    recorded first, so that the undo covers it too."""
    running = list(
        workflow.steps.filter(lane=0, status__in=[StepStatus.RUNNING, StepStatus.VERIFYING]).values_list(
            "key", flat=True
        )
    )
    if running:
        raise WrongState(
            f"Step {', '.join(running)} still has an effect in flight: compensate once its outcome is recorded."
        )


def _decider(comp_id, user, what: str) -> Compensation:
    """Inside a transaction: the compensation locked, once `user` is found
    eligible to decide it: a reviewer of its workflow's team, and not the
    person who requested it (four eyes)."""
    comp = Compensation.objects.select_for_update().select_related("workflow").get(pk=comp_id)
    comp.workflow.require_visible_to(user)
    if not roles.is_reviewer(user):
        raise NotAllowed(f"Only reviewers can {what} a compensation.")
    if persons.same(user, comp.requested_by_id):
        raise NotAllowed(
            "A compensation cannot be decided by the user who requested it, nor by another account "
            "of the same person: another person decides (four eyes)."
        )
    if comp.status != CompensationStatus.REQUESTED:
        raise WrongState(f"The compensation is {comp.status}, not awaiting a decision.")
    return comp


def current_hash(comp: Compensation) -> str:
    """What a compensation's decider names: the digest of the undo steps
    and args it will run (`binding.compensation_hash`)."""
    return binding.compensation_hash(comp.plan)


def _as_seen(comp: Compensation, seen: Seen) -> None:
    deciding.require(seen, "plan_hash")
    now = current_hash(comp)
    if seen.plan_hash != now:
        raise StaleRevision(
            "This compensation is not the one you looked at: review it again, then decide; nothing was recorded.",
            details={"current": {"plan_hash": now}},
        )


def authorize(comp: Compensation | UUID, *, by, seen: Seen, reason: str = "") -> Compensation:
    """Authorize the undo as `seen` (its `plan_hash`)."""
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        comp = _decider(getattr(comp, "pk", comp), by, "authorize")
        _as_seen(comp, seen)
        workflow = Workflow.objects.select_for_update().get(pk=comp.workflow_id)
        if workflow.status not in COMPENSABLE_WORKFLOW:
            raise WrongState(f"A {workflow.status} workflow cannot be compensated now.")
        _refuse_in_flight(workflow)
        now = timezone.now()
        context = {
            "compensation": str(comp.pk),
            "requested_by": comp.requested_by.get_username(),
            "authorized_by": by.get_username(),
            "reason": comp.reason,
            "decision_reason": reason,
        }
        comp.authorized_by, comp.decided_at, comp.plan_hash = by, now, current_hash(comp)
        binding.seal(comp)
        move(
            comp,
            CompensationStatus.AUTHORIZED,
            actor=by,
            verb="compensation.authorized",
            authorized_by=by,
            decision_reason=reason,
            decided_at=now,
            plan_hash=comp.plan_hash,
            mac=comp.mac,
            key_id=comp.key_id,
            deadline=now + timedelta(seconds=settings.DEFAULT_DEADLINE_SECONDS),
            data=context,
        )
        move(workflow, WorkflowStatus.COMPENSATING, actor=by, data=context)
        originals = {s.key: s for s in workflow.steps.filter(lane=0)}
        for index, item in enumerate(comp.plan):
            original = originals[item["compensates"]]
            undo = Step.objects.create(
                workflow=workflow,
                lane=comp.lane,
                compensation_run=comp,
                compensates=original,
                position=comp.lane * LANE_GAP + index,
                key=item["key"],
                action=item["action"],
                args=item["args"],
                operation_key=operation_key_for(workflow.pk, item["key"]),
                next_attempt_at=now if index == 0 else None,  # the next is ready when this one completes
            )
            # The link between the undo and the effect it addresses, in the trail.
            move(
                original,
                StepStatus.COMPENSATING,
                actor=by,
                verb="step.compensating",
                data={
                    **context,
                    "operation_key": original.operation_key,
                    "undo_step": undo.key,
                    "undo_operation_key": undo.operation_key,
                    "undo_action": undo.action,
                },
            )
        move(comp, CompensationStatus.RUNNING, actor=by, verb="compensation.started")
        if not comp.plan:  # only irreversible steps were chosen: nothing to run
            compensating.finish(workflow, comp)
        else:
            queue.wake(workflow)
    return comp


def decline(comp: Compensation | UUID, *, by, seen: Seen, reason: str) -> Compensation:
    reason = clean_reason(reason)
    with transaction.atomic():
        comp = _decider(getattr(comp, "pk", comp), by, "decline")
        _as_seen(comp, seen)
        move(
            comp,
            CompensationStatus.DECLINED,
            actor=by,
            verb="compensation.declined",
            authorized_by=None,
            decision_reason=reason,
            decided_at=timezone.now(),
            data={"reason": reason, "requested_by": comp.requested_by.get_username()},
        )
    return comp


# --- engine hooks (inside the engine's transaction) --------------------------


def resume(workflow: Workflow, step: Step, *, by, **data) -> None:
    """Undo a halt when an operator replays or resolves one of its steps."""
    comp = Compensation.objects.select_for_update().get(pk=step.compensation_run_id)
    if comp.status == CompensationStatus.FAILED:
        move(comp, CompensationStatus.RUNNING, actor=by, verb="compensation.resumed", data=data)
    if workflow.status == WorkflowStatus.COMPENSATION_FAILED:
        move(workflow, WorkflowStatus.COMPENSATING, actor=by, verb="workflow.resumed", data=data)
