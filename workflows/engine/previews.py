"""Effect previews (DESIGN §20): a worker's read-only look at what each step
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
from concurrent.futures import ThreadPoolExecutor

from django.db import connections, transaction
from django.utils import timezone

from workflows import actions
from workflows.actions import Action, ActionError, Preview
from workflows.audit import journal
from workflows.audit.redaction import redact, redact_text
from workflows.engine import locks
from workflows.engine.leases import WORKER
from workflows.models import Step, Workflow
from workflows.states import TERMINAL_WORKFLOW, FailureClass, PreviewState

log = logging.getLogger(__name__)

# Remote reads of one workflow's previews made at once.
CONCURRENT_READS = 8


def uses_results(value) -> bool:
    """Whether args take a value from an earlier step (`$from`)."""
    if actions.is_reference(value):
        return True
    if isinstance(value, dict):
        return any(uses_results(item) for item in value.values())
    if isinstance(value, list):
        return any(uses_results(item) for item in value)
    return False


def initial_state(action: Action | None, args) -> str:
    """A new step's preview: pending for a worker, or none to take."""
    if action is None or not action.has_preview:
        return PreviewState.NONE
    if uses_results(args):
        return PreviewState.NOT_AVAILABLE
    return PreviewState.PENDING


def take(action: Action, args: dict) -> Preview | ActionError | None:
    """The action's preview, redacted, or its classified failure. No
    database: it runs on threads that hold no connection."""
    try:
        found = action.preview(args)
    except ActionError as err:
        return ActionError(err.failure_class, redact_text(err.message)[:500])
    except Exception as exc:
        log.exception("the preview of %s raised an unclassified error", action.name)
        return ActionError(FailureClass.UNKNOWN, redact_text(f"{type(exc).__name__}: {exc}")[:500])
    if found is None:
        return None
    if not isinstance(found, Preview):
        return ActionError(FailureClass.UNKNOWN, f"the preview of {action.name} is not a Preview")
    return Preview(redact_text(str(found.summary))[:500], redact(found.details))


def stored(taken: Preview | ActionError | None) -> dict:
    """A step's preview fields for what `take` gave."""
    now = timezone.now()
    if isinstance(taken, Preview):
        return {"preview_state": PreviewState.READY, "preview": taken.as_json(), "preview_digest": taken.digest,
                "preview_error": "", "preview_failure_class": "", "preview_at": now}
    if isinstance(taken, ActionError):
        return {"preview_state": PreviewState.FAILED, "preview": None, "preview_digest": "",
                "preview_error": taken.message, "preview_failure_class": taken.failure_class, "preview_at": now}
    return {"preview_state": PreviewState.NONE, "preview": None, "preview_digest": "", "preview_error": "",
            "preview_failure_class": "", "preview_at": now}


def _detached(fn, *args):
    try:
        return fn(*args)
    finally:
        connections.close_all()


def compute(workflow_id) -> int:
    """Take the pending previews of one workflow's steps and store them.
    Idempotent: a step's preview is stored only while it is still pending,
    so a task delivered twice, or late, changes nothing. Returns the number stored."""
    found = Workflow.objects.filter(pk=workflow_id).values_list("revision", "status").first()
    if found is None or found[1] in TERMINAL_WORKFLOW:
        return 0  # gone, or ended (cancelled, rejected, expired...) before its previews: nobody will read them
    revision = found[0]
    steps = [step for step in Step.objects.filter(workflow_id=workflow_id, lane=0,
                                                  preview_state=PreviewState.PENDING).order_by("position")
             if actions.find(step.action) is not None]
    if not steps:
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
            return 0  # ended while the previews were taken: its stream stays as it ended
        if locked.revision != revision:
            return 0  # a reviewer edited the plan meanwhile: its own task takes the new previews
        for step, found in taken:
            fields = stored(found)
            if Step.objects.filter(pk=step.pk, preview_state=PreviewState.PENDING).update(**fields):
                summary[step.key] = fields["preview_digest"] or fields["preview_state"]
        if summary:
            workflow = steps[0].workflow_id
            journal.append(actor=WORKER, verb="workflow.previewed", obj_type="workflow", obj_id=workflow,
                           workflow_id=workflow, data={"previews": summary})
    return len(summary)


def must_retake(step: Step, action: Action) -> bool:
    """Whether the preview is to be taken again before this step's attempt:
    a binding action whose approval bound a preview of it
    (`bound_preview_digest`, set by the policy recheck), unless an earlier
    attempt's outcome is unknown (it stays so once repeated)."""
    return (action.preview_binding and bool(getattr(step, "bound_preview_digest", None))
            and not step.open_attempts)


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
