"""The shape of a workflow as the API answers GET /api/v1/workflows/{id}
and as webhooks carry it: plain values, serialised by the caller."""

from workflows.engine import choices, gates
from workflows.models import Workflow
from workflows.states import PreviewState, StepStatus, WorkflowStatus


def _step_out(step) -> dict:
    return {
        "key": step.key,
        "action": step.action,
        "status": step.status,
        "operation_key": step.operation_key,
        "external_ref": step.external_ref or None,
        "result": step.result,
        "preview": _preview_out(step),
        "gate": step.gate,
        "gate_decision": step.gate_decision,
        "approval": approval_out(step),
        "resolution": _pending_resolution_out(step),
        "attempts": [
            {
                "number": a.number,
                "status": a.status,
                "failure_class": a.failure_class or None,
                "started_at": a.started_at,
                "finished_at": a.finished_at,
                # The approval proof its writes carried (docs/explanation/approval-proofs.md#approval-proof), never the
                # token.
                "proof": {"kid": a.proof_kid, "jti": a.proof_jti, "approvers": a.proof_approvers or []}
                if a.proof_kid
                else None,
            }
            for a in step.attempts.all()
        ],
    }


def approval_out(step) -> dict | None:
    """Who approves this step and why, as the team's policies decided it at
    submission (docs/explanation/policies.md#approval-by-policy); null for a
    compensation step or one submitted before this was kept."""
    found = step.policy_decision
    if step.lane or not isinstance(found, dict):
        return None
    return {
        "by": found.get("by"),
        "basis": found.get("basis"),
        "grantor": found.get("grantor"),
        "decision": found.get("decision"),
        "reason": found.get("reason"),
        "why": found.get("why"),
        "policies": found.get("policies") or [],
        "version": found.get("version"),
        "approvals": found.get("approvals"),
        "groups": found.get("groups") or ([found["group"]] if found.get("group") else []),
    }


def _pending_resolution_out(step) -> dict | None:
    """An operator's answer waiting for a second person (docs/explanation/decisions.md#bound-decisions)."""
    proposal = step.proposed_resolution
    if proposal is None:
        return None
    return {
        "by": step.proposed_by.get_username(),
        "decision": proposal["decision"],
        "external_ref": proposal["external_ref"],
        "result": proposal["result"],
        "reason": proposal["reason"],
        "at": proposal["at"],
        "digest": step.proposal_digest(),
        "awaiting_confirmation": True,
    }


def _revisions_out(workflow: Workflow) -> list[dict]:
    """Every revision, oldest first (`operations.revisions`); a plan never
    edited has one, the workflow's own, and no rows (its first edit writes
    revision 1's with its own): none are read for it."""
    edited = workflow.revision > 1
    rows = sorted(workflow.revisions.all(), key=lambda row: row.number) if edited else []  # prefetched by lists
    if not rows:
        return [
            {
                "number": 1,
                "plan_hash": workflow.plan_hash,
                "by": workflow.submitted_by.get_username(),
                "at": workflow.created_at,
            }
        ]
    return [
        {"number": row.number, "plan_hash": row.plan_hash, "by": row.by.get_username(), "at": row.created_at}
        for row in rows
    ]


def _gate_out(workflow: Workflow, steps) -> dict | None:
    """The gate the workflow waits at, with what its approvers bind."""
    if workflow.status != WorkflowStatus.WAITING_GATE:
        return None
    step = next((s for s in steps if s.lane == 0 and s.status == StepStatus.WAITING_GATE), None)
    if step is None:
        return None
    return {
        "step": step.key,
        "note": str((step.gate or {}).get("note", "")),
        "approvals": len(gates.valid_approvals(step, workflow)),
        "required": gates.required(step),
        "results_digest": gates.results_digest(step),
        "options": (step.gate or {}).get("options"),
        "input_schema": (step.gate or {}).get("input_schema"),
        "standing": _standing(step, workflow),
    }


def _standing(step, workflow) -> dict | None:
    """At a typed gate, the choice and input the others approve (`gates.standing`)."""
    return gates.standing(gates.valid_approvals(step, workflow)) if choices.typed(step.gate) else None


def _preview_out(step) -> dict:
    ready = step.preview_state == PreviewState.READY and isinstance(step.preview, dict)
    return {
        "state": step.preview_state,
        "summary": step.preview.get("summary") if ready else None,
        "details": step.preview.get("details") if ready else None,
        "request": step.preview.get("request") if ready else None,
        "digest": step.preview_digest if ready else None,
        "failure_class": step.preview_failure_class or None,
        "error": step.preview_error or None,
    }


def workflow_out(workflow: Workflow) -> dict:
    steps = list(workflow.steps.all())
    return {
        "id": workflow.pk,
        "name": workflow.name,
        "status": workflow.status,
        "plan_hash": workflow.plan_hash,
        "gate": _gate_out(workflow, steps),
        "revision": workflow.revision,
        "revisions": _revisions_out(workflow),
        "submitted_by": workflow.submitted_by.get_username(),
        "team": workflow.team.name,
        "deadline": workflow.deadline,
        "escalated_at": workflow.escalated_at,
        "created_at": workflow.created_at,
        "updated_at": workflow.updated_at,
        # Who is handling the plan while it awaits a decision (docs/explanation/review.md#review).
        "claimed_by": claim[0].get_username() if (claim := workflow.claim()) else None,
        "claim_expires_at": claim[1] if claim else None,
        "steps": [_step_out(step) for step in steps if step.lane == 0],
        "compensation_steps": [
            {**_step_out(step), "compensates": step.compensates.key if step.compensates else None}
            for step in steps
            if step.lane
        ],
    }
