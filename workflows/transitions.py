"""The one place that changes a status.

`move` checks the transition table, applies the change with a conditional
update (the row must still be in the status the caller read), and appends
the audit event in the same transaction. A lost race returns False; an
illegal move raises.
"""

from django.db import transaction
from django.utils import timezone

from workflows import audit
from workflows.models import Attempt, Compensation, Step, Workflow
from workflows.states import IllegalTransition, check

_KIND = {Workflow: "workflow", Step: "step", Attempt: "attempt", Compensation: "compensation"}


def _workflow_id(obj):
    if isinstance(obj, Workflow):
        return obj.pk
    if isinstance(obj, (Step, Compensation)):
        return obj.workflow_id
    return obj.step.workflow_id


def move(obj, target: str, *, actor=None, verb: str | None = None, data: dict | None = None,
         guard: dict | None = None, **fields) -> bool:
    """Move `obj` from its current status to `target`.

    `guard` adds conditions the row must still meet (for example the fencing
    number of a claim); `fields` are written together with the status.
    Returns False, changing nothing, when the row no longer matches.
    """
    kind = _KIND[type(obj)]
    current = obj.status
    check(kind, current, target)
    model = type(obj)
    if model in (Workflow, Step, Compensation):
        fields.setdefault("updated_at", timezone.now())
    # No savepoint: the update and its audit event succeed or fail together
    # with the caller's transaction (or form their own when there is none).
    with transaction.atomic(savepoint=False):
        updated = model.objects.filter(pk=obj.pk, status=current, **(guard or {})).update(status=target, **fields)
        if not updated:
            return False
        event_data = {"from": current, "to": target}
        event_data.update(data or {})
        audit.append(
            actor=actor,
            verb=verb or f"{kind}.{target.lower()}",
            obj_type=kind,
            obj_id=obj.pk,
            workflow_id=_workflow_id(obj),
            data=event_data,
        )
    obj.status = target
    computed = [name for name, value in fields.items() if hasattr(value, "resolve_expression")]
    for name, value in fields.items():
        if name not in computed:
            setattr(obj, name, value)
    if computed:
        obj.refresh_from_db(fields=computed)
    return True


__all__ = ["move", "IllegalTransition"]
