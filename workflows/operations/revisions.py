"""Approve with edits (docs/explanation/review.md#review): a reviewer replaces the arguments of
some steps of a plan awaiting review, which makes revision N+1.

The edit is validated as a submission is (each action's argument model,
references, credentials, secrets), and nothing is stored on any error. The
new revision has a new plan hash; approvals of earlier revisions no longer
count (the revision is sealed into each approval, so even a plan edited
back to an earlier hash needs fresh approvals), and the editor, a co-author
now, cannot approve it: another reviewer does (four eyes). Every revision
is kept, with who made it and why, and the audit trail and the agent's
`workflow.revised` event say what changed, field by field. The team's
Cedar policies judge the edited plan as they judged the submitted one: a
forbid refuses the edit, and what they ask of people is asked anew.
"""

from __future__ import annotations

from uuid import UUID

from django.db import transaction
from django.utils import timezone

from workflows import actions, outbox, queue
from workflows.audit import journal
from workflows.audit.redaction import refuse_credentials
from workflows.chat import marks as chat
from workflows.engine import binding, locks, previews
from workflows.errors import DomainError, StaleRevision, WrongState
from workflows.models import PlanRevision, Step, Workflow
from workflows.operations import deciding, plans, policy_sets
from workflows.shapes import workflow_out
from workflows.states import PreviewState, StepStatus, WorkflowStatus

MISSING = object()


class RevisionInvalid(DomainError):
    code = "invalid"


def revise(workflow: Workflow | UUID, *, by, revision: int | None, steps: list[dict], comment: str = "") -> Workflow:
    """Make revision `revision` + 1: `steps` is `[{"key", "args"}]`, each
    listed step's arguments replaced whole; unlisted steps stay as they are.
    `revision` is the one the editor saw: not current, 409 `stale_revision`
    (two editors at once never overwrite each other). Only someone eligible
    to approve the plan edits it (an editor may edit again)."""
    refuse_credentials(comment=comment)
    edits = _edits(steps)
    with transaction.atomic():
        locked = locks.plan(getattr(workflow, "pk", workflow))
        deciding.eligible_reviewer(locked, by, "edit this plan", approving=True, editors_too=False)
        if locked.status != WorkflowStatus.PLANNED:
            raise WrongState(f"The workflow is {locked.status}: only a plan awaiting review can be edited.")
        deciding.require(deciding.Seen(revision=revision), "revision")
        if revision != locked.revision:
            raise StaleRevision(
                f"The plan changed since you looked: you edited revision {revision}, it is now revision "
                f"{locked.revision}. Edit the current revision; nothing was recorded.",
                details={"current": {"revision": locked.revision, "plan_hash": locked.plan_hash}},
            )
        rows = {step.key: step for step in locked.steps.filter(lane=0)}
        for index, key in enumerate(edits):
            if key not in rows:
                raise RevisionInvalid("No such step.", fields={f"steps.{index}.key": f"This plan has no step {key!r}."})
        new_plan = [{**step, "args": edits.get(step["key"], step["args"])} for step in locked.plan]
        errors = plans.validate({"name": locked.name, "steps": new_plan})
        if errors:
            raise RevisionInvalid("The edited plan is not valid.", fields=_request_paths(errors, new_plan, edits))
        changes = diff(locked.plan, new_plan)
        if not changes:
            raise RevisionInvalid(
                "The edit changes nothing.", fields={"steps": "No argument differs from the current revision."}
            )
        # The team's policies judge the edited plan as they judged the
        # submitted one (docs/explanation/policies.md#annotations): a forbid
        # or an erroring policy refuses the edit; what they ask of people
        # (`@approvals`, `@reviewer_group`) is what its approvals answer to.
        judged = policy_sets.evaluate(
            {"steps": new_plan},
            agent=locked.submitted_by.get_username(),
            team=locked.team.name,
            workflow=str(locked.pk),
        )
        judged.enforce()
        now = timezone.now()
        if locked.revision == 1 and not locked.revisions.exists():
            PlanRevision.objects.create(
                workflow=locked,
                number=1,
                plan=locked.plan,
                plan_hash=locked.plan_hash,
                by_id=locked.submitted_by_id,
                created_at=locked.created_at,
            )
        changed = [rows[key] for key in edits if rows[key].args != edits[key]]
        for step in changed:
            step.args = edits[step.key]
            step.preview_state = previews.initial_state(actions.find(step.action), step.args)
            step.preview, step.preview_digest, step.preview_error, step.preview_failure_class = None, "", "", ""
            step.preview_at = None
        Step.objects.bulk_update(
            changed,
            [
                "args",
                "preview_state",
                "preview",
                "preview_digest",
                "preview_error",
                "preview_failure_class",
                "preview_at",
            ],
        )
        decided = plans.policy_decisions(judged, revised=True)
        for step in rows.values():
            step.policy_decision = decided.get(step.key)
        Step.objects.bulk_update(list(rows.values()), ["policy_decision"])
        locked.plan = plans.canonical_plan(new_plan)
        locked.revision += 1
        locked.updated_at = now
        locked.policy_asks = judged.asks
        if any(step.preview_state == PreviewState.PENDING for step in changed):
            locked.previews_due_at = now
        locked.save(update_fields=["plan", "revision", "updated_at", "policy_asks", "previews_due_at"])
        # As claims recompute it: the hash of the steps as the database gives them back.
        locked.plan_hash = binding.stored_hashes([(locked.pk, 0)])[locked.pk, 0]
        Workflow.objects.filter(pk=locked.pk).update(plan_hash=locked.plan_hash)
        PlanRevision.objects.create(
            workflow=locked,
            number=locked.revision,
            plan=locked.plan,
            plan_hash=locked.plan_hash,
            by=by,
            comment=comment,
            created_at=now,
        )
        journal.append(
            actor=by,
            verb="workflow.revised",
            obj_type="workflow",
            obj_id=locked.pk,
            workflow_id=locked.pk,
            data={"revision": locked.revision, "plan_hash": locked.plan_hash, "comment": comment, "changes": changes},
        )
        outbox.emit(
            "workflow.revised", locked.pk, {"revision": locked.revision, "changes": changes}, shape=workflow_out
        )
        chat.changed([locked.pk])
        if any(step.preview_state == PreviewState.PENDING for step in changed):
            queue.enqueue(previews.TASK, name="previews")
    return locked


def _edits(steps) -> dict[str, dict]:
    """The request's steps as {key: args}, refused whole when malformed."""
    if not isinstance(steps, list) or not steps:
        raise RevisionInvalid("List the steps to edit.", fields={"steps": "List at least one step to edit."})
    edits: dict[str, dict] = {}
    for index, item in enumerate(steps):
        if not isinstance(item, dict) or set(item) != {"key", "args"}:
            raise RevisionInvalid(
                "Each edit is {key, args}.", fields={f"steps.{index}": "Give exactly the step's key and its new args."}
            )
        key, args = item["key"], item["args"]
        if not isinstance(key, str):
            raise RevisionInvalid("A step key is a string.", fields={f"steps.{index}.key": "Must be a string."})
        if not isinstance(args, dict):
            raise RevisionInvalid("Arguments are an object.", fields={f"steps.{index}.args": "Must be an object."})
        if key in edits:
            raise RevisionInvalid(
                "A step is listed twice.", fields={f"steps.{index}.key": f"Step {key!r} is listed twice."}
            )
        edits[key] = args
    return edits


def _request_paths(errors: dict[str, str], plan: list[dict], edits: dict) -> dict[str, str]:
    """The plan's error paths (`steps.<position>.args…`) as paths of the
    request (`steps.<index in the edit>.args…`) for the steps it edited."""
    position_to_request = {
        str(position): str(list(edits).index(step["key"])) for position, step in enumerate(plan) if step["key"] in edits
    }
    found = {}
    for path, message in errors.items():
        parts = path.split(".")
        if len(parts) > 1 and parts[0] == "steps" and parts[1] in position_to_request:
            parts[1] = position_to_request[parts[1]]
            found[".".join(parts)] = message
        else:
            found[path] = message
    return found


def diff(old_plan: list[dict], new_plan: list[dict]) -> list[dict]:
    """Field by field: `[{"step", "field", "from", "to"}]`, where `field` is
    the dotted path of the argument and a missing side is absent."""
    old_by_key = {step["key"]: step["args"] for step in old_plan}
    changes = []
    for step in new_plan:
        before = old_by_key.get(step["key"], {})
        for path, old, new in _walk(before, step["args"], ""):
            change = {"step": step["key"], "field": path}
            if old is not MISSING:
                change["from"] = old
            if new is not MISSING:
                change["to"] = new
            changes.append(change)
    return changes


def _walk(old, new, path):
    plain = lambda value: not isinstance(value, dict) or actions.is_reference(value)  # noqa: E731
    if plain(old) or plain(new):
        if old != new or type(old) is not type(new):
            yield path, old, new
        return
    for key in sorted(set(old) | set(new)):
        here = f"{path}.{key}" if path else key
        yield from _walk(old.get(key, MISSING), new.get(key, MISSING), here)


def history(workflow: Workflow) -> list[dict]:
    """Every revision, oldest first, with what each changed."""
    rows = sorted(workflow.revisions.all(), key=lambda row: row.number)  # prefetched by lists
    if not rows:
        return [
            {
                "number": 1,
                "plan_hash": workflow.plan_hash,
                "by": workflow.submitted_by.get_username(),
                "at": workflow.created_at,
                "comment": "",
                "changes": [],
            }
        ]
    out, previous = [], None
    for row in rows:
        out.append(
            {
                "number": row.number,
                "plan_hash": row.plan_hash,
                "by": row.by.get_username(),
                "at": row.created_at,
                "comment": row.comment,
                "changes": diff(previous, row.plan) if previous is not None else [],
            }
        )
        previous = row.plan
    return out


def editable_steps(workflow: Workflow) -> list[Step]:
    if workflow.status != WorkflowStatus.PLANNED:
        return []
    return list(workflow.steps.filter(lane=0, status=StepStatus.PENDING).order_by("position"))
