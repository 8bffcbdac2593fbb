"""An action's policy and limits, and the loosening requests a second operator decides."""

from datetime import datetime
from typing import Any
from uuid import UUID

from ninja import Field, Router, Schema, Status
from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt

from workflows import roles
from workflows.api import lookup
from workflows.engine import limits
from workflows.models import ActionPolicy, PolicyChange
from workflows.operations import policies, policy_sets

router = Router()


class DecisionReasonIn(Schema):
    reason: str = ""


class PolicyChangeOut(Schema):
    id: UUID
    action: str
    status: str
    changes: dict[str, Any]
    reason: str
    base_version: int
    applied_version: int | None
    requested_by: str
    decided_by: str | None
    decision_reason: str
    created_at: datetime
    decided_at: datetime | None
    policy_set: str | None = Field(None, description="For a proposed Cedar policy set version: its team (or global)")
    version: int | None = Field(None, description="For a proposed Cedar policy set version: its number")
    diff: list[str] | None = Field(
        None,
        description="For a proposed Cedar policy set version: a unified diff "
        "against the version it was proposed against",
    )


class PolicyOut(Schema):
    action: str
    enabled: bool
    risk: str
    approvals_required: int
    approval_ttl_seconds: int | None
    max_attempts: int
    max_in_flight: int | None
    rate_per_second: float | None
    review_deadline_seconds: int | None = Field(
        None,
        description="Plans using this action (and setting no review "
        "of their own) are to be decided this many "
        "seconds after submission",
    )
    review_reminder_seconds: int | None = Field(
        None, description="Reviewers are reminded so many seconds before that review deadline"
    )
    escalation_group: str | None = Field(None, description="The group told once that review deadline passes")
    reviewer_group: str = Field(
        "",
        description="The group whose members alone may approve (and gate-approve) a "
        'plan using this action; "": any reviewer of the plan\'s team',
    )
    chat_decisions: bool = Field(
        True,
        description="Whether plans using this action may be decided from a chat message (Slack); "
        "false: their messages offer only Open",
    )
    version: int
    updated_by: str
    updated_at: datetime
    in_flight: int = Field(..., description="Steps of this action RUNNING now, cluster-wide")
    paused_until: datetime | None = Field(..., description="Set while a remote's RATE_LIMITED answer pauses it")
    pending: list[PolicyChangeOut] = Field(..., description="Loosening requests awaiting a second operator")


class PolicyPatchIn(Schema):
    """Any editable fields; null removes a limit or the approval lifetime."""

    model_config = ConfigDict(extra="forbid")

    enabled: StrictBool | None = None
    risk: ActionPolicy.Risk | None = None
    approvals_required: StrictInt | None = None
    approval_ttl_seconds: StrictInt | None = None
    max_attempts: StrictInt | None = None
    max_in_flight: StrictInt | None = None
    rate_per_second: StrictFloat | StrictInt | None = None
    review_deadline_seconds: StrictInt | None = None
    review_reminder_seconds: StrictInt | None = None
    escalation_group: str | None = Field(None, max_length=150)
    reviewer_group: str | None = Field(
        None,
        max_length=150,
        description=(
            'A group name, or "" (or null) for any reviewer. Naming one where none was applies at once; changing '
            "or clearing one waits for a second operator"
        ),
    )
    chat_decisions: StrictBool | None = Field(
        None,
        description="false keeps this action's decisions in the console; turning it on waits for a second operator",
    )
    reason: str
    version: StrictInt | None = Field(None, description="The version you looked at: 409 if the policy changed since")


def policy_change_out(request: PolicyChange) -> dict:
    return {
        "id": request.pk,
        "action": request.action,
        "status": request.status,
        "changes": request.changes,
        "reason": request.reason,
        "base_version": request.base_version,
        "applied_version": request.applied_version,
        "requested_by": request.requested_by.get_username(),
        "decided_by": request.decided_by.get_username() if request.decided_by else None,
        "decision_reason": request.decision_reason,
        "created_at": request.created_at,
        "decided_at": request.decided_at,
        **(
            {
                "policy_set": request.policy_set_version.policy_set.name,
                "version": request.policy_set_version.version,
                "diff": policy_sets.diff(request),
            }
            if request.policy_set_version_id
            else {}
        ),
    }


def policy_out(rules: ActionPolicy) -> dict:
    state = limits.state(rules.action)
    return {
        **{
            name: getattr(rules, name) for name in ("action", "version", "updated_by", "updated_at", *policies.EDITABLE)
        },
        "in_flight": state["in_flight"],
        "paused_until": state["paused_until"],
        "pending": [policy_change_out(r) for r in policies.pending(rules.action)],
    }


@router.get(
    "/actions/{name}/policy",
    response=PolicyOut,
    summary="An action's policy and limits, steps in flight, pause, pending changes (operators, auditors)",
)
def get_policy(request, name: str):
    lookup.reads(request, "policies")
    return policy_out(policies.get(name, reader=request.user))


@router.patch(
    "/actions/{name}/policy",
    response={200: PolicyOut, 202: PolicyChangeOut},
    summary="Change a policy (operators): 200 when it only tightens; 202 with the request a second "
    "operator must authorize when it loosens",
)
def patch_policy(request, name: str, payload: PolicyPatchIn):
    lookup.require(request, roles.OPERATORS)
    body = payload.dict(exclude_unset=True)
    reason, version = body.pop("reason"), body.pop("version", None)
    result = policies.change(name, by=request.user, reason=reason, changes=body, version=version)
    if result.request is not None:
        return Status(202, policy_change_out(result.request))
    return policy_out(result.policy)


@router.get("/policy-changes/{change_id}", response=PolicyChangeOut, summary="One policy change request")
def get_policy_change(request, change_id: UUID):
    return policy_change_out(lookup.policy_change(request, change_id))


@router.post(
    "/policy-changes/{change_id}/authorize",
    response=PolicyChangeOut,
    summary="Apply a loosening (operators, not the requester), or make a proposed policy set version live "
    "(reviewers of its team, not the proposer); 409 if the policy changed since",
)
def authorize_policy_change(request, change_id: UUID, payload: DecisionReasonIn):
    change = lookup.policy_change(request, change_id)
    if change.policy_set_version_id is None:
        lookup.require(request, roles.OPERATORS)
    found = policies.authorize(change, by=request.user, reason=payload.reason)
    return policy_change_out(lookup.policy_change(request, found.pk))


@router.post(
    "/policy-changes/{change_id}/decline",
    response=PolicyChangeOut,
    summary="Decline a loosening (operators, not the requester) or a proposed policy set version "
    "(reviewers of its team, not the proposer)",
)
def decline_policy_change(request, change_id: UUID, payload: DecisionReasonIn):
    change = lookup.policy_change(request, change_id)
    if change.policy_set_version_id is None:
        lookup.require(request, roles.OPERATORS)
    found = policies.decline(change, by=request.user, reason=payload.reason)
    return policy_change_out(lookup.policy_change(request, found.pk))
