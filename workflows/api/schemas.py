"""Shapes more than one resource shares: a workflow as answered, what a
decision names, a reason."""

from datetime import datetime
from typing import Annotated, Any
from uuid import UUID

from ninja import Field, Schema
from pydantic import ConfigDict, StrictInt, StringConstraints

from workflows.operations.deciding import Seen

Text = Field(..., min_length=1, max_length=200)


class ApproverOut(Schema):
    sub: str = Field(..., description="opaque id of the person who approved")
    at: str = Field(..., description="when they approved (UTC, ISO 8601)")


class ProofOut(Schema):
    kid: str = Field(..., description="the signing key's id (listed at /.well-known/jwks.json)")
    jti: str = Field(..., description="the proof's unique id")
    approvers: list[ApproverOut]


class AttemptOut(Schema):
    number: int
    status: str
    failure_class: str | None
    started_at: datetime
    finished_at: datetime | None
    proof: ProofOut | None = Field(
        None,
        description="the approval proof this attempt's writes carried "
        "(docs/explanation/approval-proofs.md#approval-proof); null for in-process actions",
    )


class PreviewOut(Schema):
    state: str = Field(
        ...,
        description="NONE (the action offers none), PENDING (a worker has yet to take it), "
        "READY, FAILED, or NOT_AVAILABLE (the args use $from and the action builds "
        "no request template)",
    )
    summary: str | None
    details: dict[str, Any] | None
    request: dict[str, Any] | None = Field(
        None,
        description="The request the step will send, built by the code that sends it "
        "(docs/explanation/decisions.md#bound-decisions): {method, url, headers, body, template_sha256}, or for "
        "email.send {from, to, cc, subject, body, template_sha256}; each secret as secret:NAME, each result of an "
        "earlier step as {{from:<ref>}}. The worker refuses to send a request that is not this template with its "
        "placeholders filled. Null when the action shows none.",
    )
    digest: str | None = Field(
        ..., description="SHA-256 of the preview's canonical JSON (its request included): what an approval binds"
    )
    failure_class: str | None
    error: str | None


class PendingResolutionOut(Schema):
    by: str = Field(..., description="the operator who gave the answer; someone else confirms it")
    decision: str
    external_ref: str
    result: dict[str, Any] = Field(..., description="the result the later steps will read once it is confirmed")
    reason: str
    at: datetime
    digest: str = Field(
        ...,
        description="What a confirmation binds: pass it back to be refused (409 "
        "resolution_changed) if another answer replaced this one",
    )
    awaiting_confirmation: bool


class StepApprovalOut(Schema):
    by: str = Field(
        ...,
        description="`policy` or `grant`: the plan was approved with no person, this step by the team's policies "
        "or by a standing grant; `human`",
    )
    basis: str | None = Field(
        None,
        description="The approval's basis, `policy:<team>:<@id,...>@<version>` or `grant:<id>`; null when a "
        "person approves",
    )
    grantor: str | None = Field(None, description="Who granted the standing grant that approved this step")
    decision: str | None = Field(None, description="What the policies decided for this step: auto, human")
    reason: str | None = Field(
        None,
        description="Why: permitted, no_policy_set, no_permit, auto_forbidden, reference, destructive, annotation, "
        "action_policy",
    )
    why: str | None = Field(None, description="The reason in words, naming the policies")
    policies: list[str] = Field(default_factory=list, description="The @id of each policy that decided")
    version: int | None = Field(None, description="The version of the team's policy set that decided")
    approvals: int | None = Field(
        None, description="The approvals the deciding permits ask people for (`@approvals`); null when none asks"
    )
    groups: list[str] = Field(
        default_factory=list,
        description="The reviewer groups the deciding permits ask approvers to be in (`@reviewer_group`)",
    )


class StepOut(Schema):
    key: str
    action: str
    status: str
    operation_key: str
    external_ref: str | None
    result: dict[str, Any] | None
    preview: PreviewOut
    attempts: list[AttemptOut]
    gate: dict[str, Any] | None = Field(None, description="The step's gate, as submitted, or null")
    gate_decision: dict[str, Any] | None = Field(
        None,
        description="At a typed gate that opened: the {choice, input} its approvers agreed on "
        "(docs/explanation/review.md#typed-decisions), else null",
    )
    approval: StepApprovalOut | None = Field(
        None,
        description="Who approves this step and why, as the team's Cedar policies decided it when the plan was "
        "submitted (docs/explanation/policies.md#approval-by-policy); null for steps submitted before this was kept",
    )
    resolution: PendingResolutionOut | None = Field(
        None,
        description="An operator's answer for this IN_DOUBT step that later steps read by $from: it takes "
        "effect once a second person confirms it (POST .../resolve/confirm); until then the "
        "workflow waits in NEEDS_ATTENTION. Null when none waits",
    )


class GateOut(Schema):
    step: str
    note: str
    approvals: int = Field(..., description="Gate approvals that count so far")
    required: int
    results_digest: str = Field(
        ...,
        description="What an approval binds: the digest of the results before the "
        "gate; pass it back to be refused (409 results_changed) if they "
        "changed since",
    )
    options: list[str] | None = Field(None, description="A typed gate's options (the decision's `choice`)")
    input_schema: dict[str, Any] | None = Field(
        None, description="A typed gate's JSON Schema of the decision's `input`"
    )
    standing: dict[str, Any] | None = Field(
        None,
        description="The {choice, input} the first approver gave, which each other approver sends back as it "
        "is (else 409 decision_differs); null before the first approval or at an untyped gate",
    )


class CompensationStepOut(StepOut):
    compensates: str | None


class RevisionOut(Schema):
    number: int
    plan_hash: str
    by: str
    at: datetime


class WorkflowOut(Schema):
    id: UUID
    name: str
    status: str
    plan_hash: str
    submitted_by: str
    team: str = Field(..., description="The team whose plan it is: its people review and operate it")
    deadline: datetime
    escalated_at: datetime | None = Field(
        None,
        description='When its deadline passed undecided and its review (`"on_expiry": "escalate"`) sent it once to '
        "its escalate_to group, the deadline extended; null if it never was",
    )
    created_at: datetime
    updated_at: datetime
    gate: GateOut | None = Field(None, description="The gate the workflow waits at (WAITING_GATE), else null")
    revision: int = Field(1, description="1 as submitted, one more for each reviewer's edit")
    revisions: list[RevisionOut] = Field(default_factory=list, description="Every revision, oldest first")
    claimed_by: str | None = Field(
        None,
        description="The reviewer handling the plan while it awaits a decision "
        "(a claim informs, it never blocks a decision)",
    )
    claim_expires_at: datetime | None = Field(
        None, description="When that claim lapses without its holder's activity (REVIEW_CLAIM_MINUTES)"
    )
    steps: list[StepOut]
    compensation_steps: list[CompensationStepOut]


class WorkflowPage(Schema):
    items: list[WorkflowOut]
    next: str | None


Digest = Annotated[str, StringConstraints(pattern=r"^[0-9a-f]{64}$")]


class DecisionIn(Schema):
    """What every decision on a plan names: the revision and plan hash the
    decider saw (read them from `GET /workflows/{id}`)."""

    model_config = ConfigDict(extra="forbid")

    comment: str = Field("", max_length=4000)
    revision: StrictInt = Field(
        ...,
        ge=1,
        description="The revision you saw: 409 `stale_revision` (with `current`) "
        "and nothing recorded if it is no longer current",
    )
    plan_hash: Digest = Field(
        ..., description="The plan hash of that revision: 409 `stale_revision` if it is not the plan's current hash"
    )


def seen(payload) -> Seen:
    """What a decision says its decider saw, as the operations check it."""
    return Seen(
        revision=payload.revision,
        plan_hash=payload.plan_hash,
        preview_digests=getattr(payload, "preview_digests", None),
        results_digest=getattr(payload, "results_digest", None),
    )


class ReasonIn(Schema):
    reason: str
