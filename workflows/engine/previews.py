"""Effect previews (docs/explanation/actions.md#actions): a worker's read-only look at what each step
would do, for the reviewer, and the look taken again before a binding effect.

Previews are taken by a worker after submission (`compute`), never in a web
request, and outside any transaction: a remote read holds no row lock and
no transaction open while it waits. What a preview says comes from other
systems, so it is redacted before it is stored, and its digest is taken of
what is stored, which is what the reviewer sees and what an approval binds.

An action with `preview_binding` has its preview taken again just before
its attempt (`must_retake`, `changed`); a preview that is no longer the
approved one blocks the step for a fresh approval. Never after an attempt
whose outcome is unknown: the remote system may then show the step's own
effect (the ticket it closed), which is no reason to stop it.
"""

from __future__ import annotations

import logging
import time
from concurrent.futures import ThreadPoolExecutor
from datetime import timedelta

from django.conf import settings
from django.db import connections, transaction
from django.utils import timezone

from workflows import actions, db
from workflows.actions import Action, ActionError, Preview
from workflows.actions.args import is_decision
from workflows.audit import journal
from workflows.audit.redaction import redact, redact_text
from workflows.chat import marks as chat
from workflows.engine import locks
from workflows.engine.leases import WORKER
from workflows.models import Step, Workflow
from workflows.states import TERMINAL_WORKFLOW, FailureClass, PreviewState

log = logging.getLogger(__name__)

# Remote reads of one workflow's previews made at once.
CONCURRENT_READS = 8


def uses_results(value) -> bool:
    """Whether args take a value from an earlier step (`$from`) or gate (`$decision`)."""
    if actions.is_reference(value) or is_decision(value):
        return True
    if isinstance(value, dict):
        return any(uses_results(item) for item in value.values())
    if isinstance(value, list):
        return any(uses_results(item) for item in value)
    return False


def initial_state(action: Action | None, args) -> str:
    """A new step's preview: pending for a worker, or none to take. Args
    that use `$from` leave nothing to look at before the step runs, except
    the template of the request an action builds (`Action.request`)."""
    if action is None or not action.has_preview:
        return PreviewState.NONE
    if uses_results(args) and not action.has_request:
        return PreviewState.NOT_AVAILABLE
    return PreviewState.PENDING


def take(action: Action, args: dict) -> Preview | ActionError | None:
    """The action's preview, redacted, with the template of its request
    (docs/explanation/decisions.md#bound-decisions), or its classified failure. Args that use `$from` get the
    template alone: the action's own preview never sees a `$from`. No
    database: it runs on threads that hold no connection."""
    try:
        request = action.request(args) if action.has_request else None
        found = Preview(request.summary) if request is not None and uses_results(args) else action.preview(args)
    except ActionError as err:
        return ActionError(err.failure_class, redact_text(err.message)[:500])
    except Exception as exc:
        log.exception("the preview of %s raised an unclassified error", action.name)
        return ActionError(FailureClass.UNKNOWN, redact_text(f"{type(exc).__name__}: {exc}")[:500])
    if found is None and request is None:
        return None
    if found is not None and not isinstance(found, Preview):
        return ActionError(FailureClass.UNKNOWN, f"the preview of {action.name} is not a Preview")
    found = found or Preview(request.summary)
    return Preview(
        redact_text(str(found.summary))[:500],
        redact(found.details),
        _redacted(request.shown()) if request is not None else None,
    )


def _redacted(template: dict) -> dict:
    """The template as shown, each text redacted as remote text is (a
    credential in TICKET_DESK_URL, say). By value, not by key: a header
    named Authorization shows its `secret:NAME`. Its `template_sha256` is
    of the template as built, which the engine builds again to compare."""

    def walk(value):
        if isinstance(value, str):
            return redact_text(value)
        if isinstance(value, dict):
            return {key: walk(item) for key, item in value.items()}
        if isinstance(value, list):
            return [walk(item) for item in value]
        return value

    return walk(template)


def stored(taken: Preview | ActionError | None) -> dict:
    """A step's preview fields for what `take` gave."""
    now = timezone.now()
    if isinstance(taken, Preview):
        return {
            "preview_state": PreviewState.READY,
            "preview": taken.as_json(),
            "preview_digest": taken.digest,
            "preview_error": "",
            "preview_failure_class": "",
            "preview_at": now,
        }
    if isinstance(taken, ActionError):
        return {
            "preview_state": PreviewState.FAILED,
            "preview": None,
            "preview_digest": "",
            "preview_error": taken.message,
            "preview_failure_class": taken.failure_class,
            "preview_at": now,
        }
    return {
        "preview_state": PreviewState.NONE,
        "preview": None,
        "preview_digest": "",
        "preview_error": "",
        "preview_failure_class": "",
        "preview_at": now,
    }


def _detached(fn, *args):
    try:
        return fn(*args)
    finally:
        connections.close_all()


def compute_due(budget: float | None = None) -> int:
    """Take the previews of every plan that has some due
    (`Workflow.previews_due_at`), oldest first, until none is left or
    `budget` seconds have passed (the worker loop's sweep queues the next
    wake-up while any are due). Each plan is claimed first by a conditional
    update that moves its time ahead by the task's timeout: workers and
    clusters sweeping at once never read the same plan's previews twice,
    and a worker killed mid-read leaves a claim that lapses. A burst of
    submissions queues a wake-up each, which the lane's broker collapses
    (`queue.WAKE_UPS`): it costs a few tasks, not one per plan. Returns the
    previews stored."""
    if budget is None:
        budget = min(BUDGET_SECONDS, settings.Q_CLUSTER["timeout"] / 4)
    deadline = time.monotonic() + budget
    stored = 0
    while time.monotonic() < deadline:
        workflow_id = _claim_due()
        if workflow_id is None:
            break
        stored += compute(workflow_id)
    return stored


# The wake-up that takes every due plan's previews (`compute_due`).
TASK = "workflows.tasks.compute_due_previews"
# How long one previews wake-up goes on while plans are due.
BUDGET_SECONDS = 20.0
# Due plans read at once to claim one of: the others' claims are taken first.
CANDIDATES = 8


def any_due() -> bool:
    return db.exist({"due": due()})["due"]


def due():
    """The plans whose previews are due now, oldest first: in that order
    the plans' table is read through `workflow_previews_due` to the first
    due, whatever the planner's statistics (the worker loop's sweep asks;
    `exists()` drops the order, and a stale estimate scanned every plan)."""
    return Workflow.objects.filter(previews_due_at__lte=timezone.now(), restored_at__isnull=True).order_by(
        "previews_due_at"
    )


def _claim_due():
    """The id of the oldest plan whose previews are due, claimed for the
    task's timeout (`Q_TIMEOUT`, after which django-q2 kills it), or None."""
    for workflow_id, due_at in due().values_list("pk", "previews_due_at")[:CANDIDATES]:
        claimed_until = timezone.now() + timedelta(seconds=settings.Q_CLUSTER["timeout"])
        if Workflow.objects.filter(pk=workflow_id, previews_due_at=due_at).update(previews_due_at=claimed_until):
            return workflow_id
    return None


def _settled(workflow_id) -> None:
    """Nothing (more) to take for this plan: out of the due ones."""
    Workflow.objects.filter(pk=workflow_id, previews_due_at__isnull=False, restored_at__isnull=True).update(
        previews_due_at=None
    )


def compute(workflow_id) -> int:
    """Take the pending previews of one workflow's steps and store them.
    Idempotent: a step's preview is stored only while it is still pending,
    so a task delivered twice, or late, changes nothing. Returns the number stored."""
    found = Workflow.objects.filter(pk=workflow_id).values_list("revision", "status").first()
    if found is None:
        return 0
    if found[1] in TERMINAL_WORKFLOW:
        # Ended (cancelled, rejected, expired...) before its previews: nobody
        # will read them, and its audit stream stays as it ended.
        _settled(workflow_id)
        return 0
    revision = found[0]
    steps = [
        step
        for step in Step.objects.filter(workflow_id=workflow_id, lane=0, preview_state=PreviewState.PENDING).order_by(
            "position"
        )
        if actions.find(step.action) is not None
    ]
    if not steps:
        _settled(workflow_id)
        return 0
    # The reads run while this connection sits idle in autocommit: no
    # transaction is open and no row is locked while a remote system answers.
    with ThreadPoolExecutor(min(CONCURRENT_READS, len(steps)), thread_name_prefix="preview") as pool:
        futures = [(step, pool.submit(_detached, take, actions.get(step.action), step.args)) for step in steps]
        taken = [(step, future.result()) for step, future in futures]
    summary = {}
    with transaction.atomic():
        # The plan's rows in the one order (`locks`): an approval locks
        # them, journals, then marks the first step ready.
        locked = locks.plan(workflow_id)
        if locked.status in TERMINAL_WORKFLOW:
            _settled(workflow_id)
            return 0  # ended while the previews were taken: its stream stays as it ended
        if locked.revision != revision:
            return 0  # a reviewer edited the plan meanwhile: the edit made it due again, for the new previews
        if locked.previews_due_at is not None:
            _settled(workflow_id)
        for step, found in taken:
            fields = stored(found)
            if Step.objects.filter(pk=step.pk, preview_state=PreviewState.PENDING).update(**fields):
                summary[step.key] = fields["preview_digest"] or fields["preview_state"]
        if summary:
            workflow = steps[0].workflow_id
            journal.append(
                actor=WORKER,
                verb="workflow.previewed",
                obj_type="workflow",
                obj_id=workflow,
                workflow_id=workflow,
                data={"previews": summary},
            )
            chat.changed([workflow])
    return len(summary)


def request_problems(step: Step, action: Action | None) -> list[str]:
    """Why this step must not send its request (it is BLOCKED,
    POLICY_FAILED, and nothing is sent): the request its action builds now
    from the stored args, before any reference is filled, is not the
    template the approval bound. Only a step whose approval bound a preview
    with a request (`bound_preview_digest`, set by the policy recheck) has
    one to keep to; the preview on record must still hash to that digest."""
    bound = getattr(step, "bound_preview_digest", None)
    if action is None or not action.has_request or not bound:
        return []
    approved = step.preview if isinstance(step.preview, dict) else {}
    try:
        kept = Preview(**approved).digest == bound
    except TypeError:
        kept = False
    if not kept:
        return [
            (
                f"the approved preview (digest {bound[:12]}…) is no longer on record: its request cannot be "
                "checked before it is sent"
            )
        ]
    if approved.get("request") is None:
        return []  # approved before previews carried requests: the plan hash binds its args
    was = approved["request"] if isinstance(approved["request"], dict) else {}
    try:
        rebuilt = action.request(step.args)
    except ActionError as err:
        return [f"the request could not be built again before it is sent ({redact_text(str(err))[:300]})"]
    template = rebuilt.shown()
    if template["template_sha256"] == was.get("template_sha256"):
        return []
    return [
        (
            f"the request it would send is not the one approved: approved {_described(was)} "
            f"(template {str(was.get('template_sha256'))[:12]}…), now {_described(_redacted(template))} "
            f"(template {template['template_sha256'][:12]}…)"
        )
    ]


def _described(template: dict) -> str:
    if "method" in template:
        return f"{template.get('method')} {template.get('url')}"
    return f"mail from {template.get('from')} to {', '.join(map(str, template.get('to') or []))}"


def must_retake(step: Step, action: Action) -> bool:
    """Whether the preview is to be taken again before this step's attempt:
    a binding action whose approval bound a preview of it
    (`bound_preview_digest`, set by the policy recheck), unless an earlier
    attempt's outcome is unknown (it stays so once repeated)."""
    return action.preview_binding and bool(getattr(step, "bound_preview_digest", None)) and not step.open_attempts


def changed(step: Step, taken: Preview | ActionError | None) -> tuple[list[str], dict] | None:
    """None when the preview taken again is the approved one. Otherwise why
    the step must not run, and its preview fields to store with the block:
    the new preview beside the approved one."""
    if isinstance(taken, Preview) and taken.digest == step.bound_preview_digest:
        return None
    approved = step.preview if step.preview_digest == step.bound_preview_digest else None
    was = f"“{approved['summary']}”" if approved else f"digest {step.bound_preview_digest[:12]}…"
    if isinstance(taken, Preview):
        problem = f"preview changed since it was approved: approved {was}, now “{taken.summary}”"
    elif isinstance(taken, ActionError):
        problem = f"preview could not be taken again before the effect ({taken}); approved {was}"
    else:
        problem = f"preview no longer offered by {step.action}; approved {was}"
    return [problem], {**stored(taken), "approved_preview": approved}
