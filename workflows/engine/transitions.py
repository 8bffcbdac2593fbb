"""The one place that changes a status.

`move` checks the transition table, applies the change with a conditional
update (the row must still be in the status the caller read), and appends
the audit event in the same transaction, where a workflow's move is also
announced to its waiters (`announcements`), emits its webhook event
(`workflows.outbox`), marks the chat messages that show it
(`workflows.chat.marks`) and, leaving review, is counted for the analytics
(`review_outcomes`). A lost race returns False; an illegal move raises.
"""

from django.db import transaction
from django.utils import timezone

from workflows import outbox
from workflows.audit import journal
from workflows.chat import marks as chat
from workflows.db import update_rows
from workflows.engine import announcements, review_outcomes
from workflows.errors import WrongState
from workflows.models import Attempt, Compensation, PolicyChange, StandingGrant, Step, Workflow
from workflows.shapes import workflow_out
from workflows.states import IllegalTransition, StepStatus, check

_KIND = {
    Workflow: "workflow",
    Step: "step",
    Attempt: "attempt",
    Compensation: "compensation",
    PolicyChange: "policy_change",
    StandingGrant: "grant",
}


def _workflow_id(obj):
    if isinstance(obj, Workflow):
        return obj.pk
    if isinstance(obj, (Step, Compensation)):
        return obj.workflow_id
    if isinstance(obj, (PolicyChange, StandingGrant)):
        return None
    return obj.step.workflow_id


def move(
    obj,
    target: str,
    *,
    actor=None,
    verb: str | None = None,
    data: dict | None = None,
    guard: dict | None = None,
    **fields,
) -> bool:
    """Move `obj` from its current status to `target`.

    `guard` adds conditions the row must still meet (for example the fencing
    number of a claim); `fields` are written together with the status.
    Returns False, changing nothing, when the row no longer matches.
    """
    kind = _KIND[type(obj)]
    current = obj.status
    check(kind, current, target)
    model = type(obj)
    if model is Workflow and obj.__dict__.get("restored_at"):
        # Brought back from its archive to be read (docs/explanation/operations-at-scale.md#operations-at-scale); the
        # database's trigger would refuse the update anyway.
        raise WrongState("This workflow is archived: it was restored read-only and cannot change.")
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
        journal.append(
            actor=actor,
            verb=verb or f"{kind}.{target.lower()}",
            obj_type=kind,
            obj_id=obj.pk,
            workflow_id=_workflow_id(obj),
            data=event_data,
        )
        if model is Workflow:
            announcements.workflows_moved([obj.pk], current, target)
            outbox.workflows_moved([obj], target, shape=workflow_out)
        if review_outcomes.ends_review(model, current, target):
            review_outcomes.record([obj], target, actor, fields["updated_at"])
        _shown([obj], current, target)
    obj.status = target
    computed = [name for name, value in fields.items() if hasattr(value, "resolve_expression")]
    for name, value in fields.items():
        if name not in computed:
            setattr(obj, name, value)
    if computed:
        obj.refresh_from_db(fields=computed)
    return True


def move_many(
    objs: list,
    target: str,
    *,
    actor=None,
    verb: str | None = None,
    expect: tuple[str, ...] = (),
    data=None,
    each=None,
    locked: bool = False,
    log: list | None = None,
    **fields,
) -> list:
    """Move several rows of one kind, all read in the same status, to `target`
    in the caller's transaction: one lock, one update and one audit insert
    for the lot, with the same checks as `move`.

    A row is moved only while it is still in the status the caller read and
    still holds the in-memory values of the `expect` fields (for example the
    claim's fencing number); the others are left alone, as `move` leaves a
    lost race. `each(obj)` gives per-row fields, `data(obj)` per-row audit
    data. Returns the objects moved, updated in memory.

    `locked`: the caller already holds these rows' locks, taken in this
    transaction after it read them, so there is nothing left to check.
    `log`: collect the audit entries there, for the caller to append with
    the rest of its transaction's (one `journal.append_many`).
    """
    if not objs:
        return []
    if not transaction.get_connection().in_atomic_block:
        raise RuntimeError("move_many runs inside the caller's transaction")
    model = type(objs[0])
    kind = _KIND[model]
    current = objs[0].status
    for obj in objs:
        if type(obj) is not model or obj.status != current:
            raise ValueError("move_many moves rows of one kind from one status")
    check(kind, current, target)
    if model in (Workflow, Step, Compensation):
        fields.setdefault("updated_at", timezone.now())
    if locked:
        moving = list(objs)
    else:
        by_pk = {obj.pk: obj for obj in objs}
        # Lock in key order (no deadlock between batches), then keep the rows
        # that still match what the caller read: the same test as move's update.
        # The rows are found by key alone and their status compared here: with
        # the status in the query and no planner statistics (a burst, autovacuum
        # behind), PostgreSQL read the whole status index range (every plan
        # APPROVED, every step PENDING) to intersect it with these few keys.
        rows = model.objects.select_for_update().filter(pk__in=by_pk).order_by("pk")
        found = rows.values_list("pk", "status", *expect)
        moving = [
            by_pk[pk]
            for pk, status, *values in found
            if status == current and all(getattr(by_pk[pk], name) == value for name, value in zip(expect, values))
        ]
        if not moving:
            return []
    for obj in moving:
        obj.status = target
        for name, value in fields.items():
            setattr(obj, name, value)
    if each is None:
        model.objects.filter(pk__in=[obj.pk for obj in moving]).update(status=target, **fields)
    else:
        names = set()
        for obj in moving:
            for name, value in each(obj).items():
                setattr(obj, name, value)
                names.add(name)
        update_rows(model, ["status", *fields, *sorted(names)], moving)
    entries = [
        journal.Entry(
            actor,
            verb or f"{kind}.{target.lower()}",
            kind,
            obj.pk,
            _workflow_id(obj),
            {"from": current, "to": target, **((data(obj) if callable(data) else data) or {})},
        )
        for obj in moving
    ]
    if log is None:
        journal.append_many(entries)
    else:
        log.extend(entries)
    if model is Workflow:
        announcements.workflows_moved([obj.pk for obj in moving], current, target)
        outbox.workflows_moved(moving, target, shape=workflow_out)
    if review_outcomes.ends_review(model, current, target):
        review_outcomes.record(moving, target, actor, fields["updated_at"])
    _shown(moving, current, target)
    return moving


def _shown(objs: list, current: str, target: str) -> None:
    """The chat messages these moves change (docs/guides/slack-reviewers.md#when-the-message-changes):
    a plan decided, expired or cancelled, a gate opening or closing, a
    compensation decided."""
    if not chat.enabled():
        return
    model = type(objs[0])
    if model is Workflow:
        chat.workflows_moved([obj.pk for obj in objs], current, target)
    elif model is Step and target == StepStatus.WAITING_GATE:
        for step in objs:
            chat.opened(step.workflow_id, "gate", step.key)
    elif (model is Step and current == StepStatus.WAITING_GATE) or model is Compensation:
        chat.changed({obj.workflow_id for obj in objs})


__all__ = ["move", "move_many", "IllegalTransition"]
