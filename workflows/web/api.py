"""The JSON API (DESIGN §12): agents submit plans; people decide over HTTP."""

import re
from datetime import datetime, timedelta
from typing import Annotated, Any, Literal
from uuid import UUID

from django.http import Http404, HttpRequest
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer
from pydantic import ConfigDict, StrictBool, StrictFloat, StrictInt, StringConstraints

from workflows import actions, roles
from workflows.actions import catalog
from workflows.audit import identity, journal
from workflows.engine import limits, policy
from workflows.errors import Archived, DomainError, NotAllowed
from workflows.models import ActionPolicy, ArchivedWorkflow, Compensation, DeadLetter, Job, PolicyChange, Workflow
from workflows.operations import (
    approvals,
    bulk,
    cancellation,
    claims,
    compensation,
    deadletters,
    plans,
    policies,
    resolution,
    revisions,
    tokens,
)
from workflows.operations import gates as gate_decisions
from workflows.operations.deciding import Seen
from workflows.shapes import workflow_out
from workflows.states import FailureClass, WorkflowStatus
from workflows.web import waiting
from workflows.web.jsonparse import BadJSON, DepthLimitedParser
from workflows.web.pagination import page_by_created


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = tokens.authenticate(token)
        if user is not None:
            request.user = user
            # The agent's events name the token they came with: its public
            # prefix, as tokens.issue stores and shows it.
            identity.update(username=user.get_username(), token=token[:10], subject="", issuer="")
        return user


ERROR_RESPONSES = {
    "400": "Invalid input: see error.fields",
    "401": "Missing or invalid bearer token",
    "403": "Not allowed for your role",
    "404": "No such object (or not visible to you)",
    "409": "Conflict with the object's current state",
    "410": "The workflow was archived (`manage.py archive`): the message says when",
    "413": "Request body too large",
}
ERROR_SCHEMA = {
    "type": "object",
    "required": ["error"],
    "properties": {
        "error": {
            "type": "object",
            "required": ["code", "message"],
            "properties": {
                "code": {"type": "string"},
                "message": {"type": "string"},
                "fields": {"type": "object", "additionalProperties": {"type": "string"}},
            },
        }
    },
}


ARGS_DESCRIPTION = (
    "The arguments of the step's action, checked strictly against that action's schema (the "
    "`<action>.args` components; `args_schema` in GET /api/v1/actions) and stored exactly as sent."
)


def _args_components(components: dict) -> list[dict]:
    """Each installed action's args schema as a component `<action>.args`
    (its nested models `<action>.args.<Model>`); a $ref to each."""
    refs = []
    for name in actions.names():
        component = re.sub(r"[^A-Za-z0-9._-]", "_", name) + ".args"
        schema = catalog.args_schema(actions.get(name), ref_template=f"#/components/schemas/{component}.{{model}}")
        for model, definition in schema.pop("$defs", {}).items():
            components[f"{component}.{model}"] = definition
        components[component] = schema
        refs.append({"$ref": f"#/components/schemas/{component}"})
    return refs


class DurableAPI(NinjaAPI):
    def get_openapi_schema(self, *args, **kwargs):
        """Every operation documents the error shape it may answer with, and
        a plan's step args point at the schemas of the actions' args."""
        schema = super().get_openapi_schema(*args, **kwargs)
        for operations in schema["paths"].values():
            for operation in operations.values():
                responses = operation.setdefault("responses", {})
                for code, description in ERROR_RESPONSES.items():
                    responses.setdefault(
                        code,
                        {
                            "description": description,
                            "content": {"application/json": {"schema": ERROR_SCHEMA}},
                        },
                    )
        components = schema.setdefault("components", {}).setdefault("schemas", {})
        refs = _args_components(components)
        for holder in ("StepIn", "CompensationIn"):
            components[holder]["properties"]["args"].update(description=ARGS_DESCRIPTION, anyOf=refs)
        return schema


api = DurableAPI(
    title="Durable Console API",
    version="1",
    auth=BearerToken(),
    urls_namespace="api",
    parser=DepthLimitedParser(),
    openapi_url="/openapi.json",
    docs_url="/docs",
)


# --- errors: always {"error": {"code", "message", "fields"?}} ---------------


class CurrentOut(Schema):
    revision: int | None = Field(None, description="the plan's current revision (absent for a compensation)")
    plan_hash: str


class ErrorBody(Schema):
    code: str
    message: str
    fields: dict[str, str] | None = None
    current: CurrentOut | None = Field(None, description="with `stale_revision`: what is current now")


class ErrorOut(Schema):
    error: ErrorBody


def error(request, status: int, code: str, message: str, fields: dict | None = None, details: dict | None = None):
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
    body.update(details or {})
    return api.create_response(request, {"error": body}, status=status)


def _field_path(loc) -> str:
    parts = [str(p) for p in loc]
    # ninja reports ("body", "<param name>", ...field path)
    if len(parts) > 2 and parts[0] == "body":
        parts = parts[2:]
    elif parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return ".".join(parts) or "body"


@api.exception_handler(ValidationError)
def on_validation_error(request, exc: ValidationError):
    fields = {}
    for item in exc.errors:
        fields.setdefault(_field_path(item.get("loc", ())), item.get("msg", "Invalid value."))
    return error(request, 400, "invalid", "The request is not valid.", fields)


@api.exception_handler(AuthenticationError)
def on_auth_error(request, exc):
    return error(request, 401, "unauthorized", "A valid bearer token is required.")


@api.exception_handler(DomainError)
def on_domain_error(request, exc: DomainError):
    return error(request, exc.status, exc.code, exc.message, exc.fields, exc.details)


@api.exception_handler(plans.PlanInvalid)
def on_plan_invalid(request, exc: plans.PlanInvalid):
    return error(request, 400, "invalid", "The plan is not valid.", exc.fields)


@api.exception_handler(plans.SubmissionConflict)
def on_conflict(request, exc):
    return error(request, 409, "conflict", str(exc))


@api.exception_handler(Http404)
def on_not_found(request, exc):
    return error(request, 404, "not_found", "No such object.")


@api.exception_handler(HttpError)
def on_http_error(request, exc: HttpError):
    code = {400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(exc.status_code, "error")
    # ninja words every body the parser refused "Cannot parse request body"; the parser says why.
    message = str(exc.__cause__) if isinstance(exc.__cause__, BadJSON) else str(exc)
    return error(request, exc.status_code, code, message)


# --- schemas --------------------------------------------------------------

Text = Field(..., min_length=1, max_length=200)


class CompensationIn(Schema):
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)


GATE_SCHEMA = {
    "type": "object",
    "additionalProperties": False,
    "required": ["approvals"],
    "properties": {
        "approvals": {
            "type": "integer",
            "minimum": 1,
            "maximum": 10,
            "description": "Reviewers who must approve before this step runs",
        },
        "note": {"type": "string", "maxLength": 2000, "description": "What the reviewers are to check at the gate"},
    },
}


class StepIn(Schema):
    key: str = Field(..., min_length=1, max_length=64)
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)
    compensation: CompensationIn | None = None
    # Checked by `plans.validate` (field errors at steps.<i>.gate.<field>) and
    # stored exactly as sent, so it is a plain object here.
    gate: dict[str, Any] | None = Field(
        None,
        description="Pause the run before this step until reviewers approve it, seeing the results of the "
        "steps before it (not on the first step)",
        json_schema_extra={"anyOf": [GATE_SCHEMA, {"type": "null"}]},
    )


class PlanIn(Schema):
    name: str = Text
    submission_key: str = Text
    # Strict: "5" or 5.0 is refused, not read as 5.
    deadline_seconds: StrictInt | None = None
    context: dict[str, Any] | None = None
    callback_url: str | None = Field(
        None,
        max_length=2048,
        description=(
            "Where this plan's events are posted, signed with your webhook secret (Standard Webhooks): https, or "
            "http to a loopback host."
        ),
    )
    steps: list[StepIn] = Field(..., min_length=1)
    review: dict[str, Any] | None = Field(
        None,
        description="Review deadline (seconds from submission, before the plan's own deadline), reminders "
        "so many seconds before it, and the group told once it passes; checked by the server "
        "(field errors at review.<field>)",
        json_schema_extra={
            "anyOf": [
                {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["deadline_seconds"],
                    "properties": {
                        "deadline_seconds": {"type": "integer", "minimum": 1},
                        "remind_before_seconds": {
                            "type": "array",
                            "maxItems": 5,
                            "items": {"type": "integer", "minimum": 1},
                        },
                        "escalate_to": {"type": "string"},
                    },
                },
                {"type": "null"},
            ]
        },
    )


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
        None, description="the approval proof this attempt's writes carried (DESIGN §25); null for in-process actions"
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
        description="The request the step will send, built by the code that sends it (DESIGN §27): "
        "{method, url, headers, body, template_sha256}, or for email.send {from, to, cc, subject, "
        "body, template_sha256}; each secret as secret:NAME, each result of an earlier step as "
        "{{from:<ref>}}. The worker refuses to send a request that is not this template with its "
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
    deadline: datetime
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


class ApprovalIn(DecisionIn):
    preview_digests: dict[Annotated[str, StringConstraints(max_length=64)], Digest] | None = Field(
        None,
        description="`{step key: digest}` of the previews you were shown (every step whose preview is READY; "
        "`{}` when none were): required when the plan has previews (400 naming it), 409 "
        "`preview_changed` if they are no longer the current ones.",
    )


def visible_workflows(user):
    return (
        Workflow.objects.visible_to(user)
        .select_related("submitted_by", "claimed_by")
        .prefetch_related("steps__attempts", "steps__compensates", "revisions__by")
    )


def _get_workflow(request, workflow_id: UUID) -> Workflow:
    workflow = visible_workflows(request.user).filter(pk=workflow_id).first()
    if workflow is None:
        archived = ArchivedWorkflow.objects.visible_to(request.user).filter(workflow_id=workflow_id).first()
        if archived is not None:  # moved out by `manage.py archive` (DESIGN §24)
            raise Archived(f"Workflow {workflow_id} was archived on {archived.archived_at:%Y-%m-%d}.")
        raise Http404
    return workflow


# --- endpoints ------------------------------------------------------------


@api.post("/workflows", response={200: WorkflowOut, 201: WorkflowOut}, summary="Submit a plan")
def submit_workflow(request, payload: PlanIn):
    submission = plans.submit(request.user, payload.dict())
    workflow = _get_workflow(request, submission.workflow.pk)
    return Status(201 if submission.created else 200, workflow_out(workflow))


@api.get("/workflows", response=WorkflowPage, summary="List workflows, newest first")
def list_workflows(
    request,
    status: WorkflowStatus | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
    claim: Literal["mine", "unclaimed"] | None = Query(
        None, description="`mine`: plans you hold; `unclaimed`: plans nobody holds now"
    ),
):
    workflows = visible_workflows(request.user)
    if status:
        workflows = workflows.filter(status=status)
    if claim == "mine":
        workflows = claims.held_by(workflows, request.user)
    elif claim == "unclaimed":
        workflows = claims.unclaimed(workflows)
    rows, next_cursor = page_by_created(workflows, cursor, limit)
    return {"items": [workflow_out(w) for w in rows], "next": next_cursor}


@api.get("/workflows/{workflow_id}", response=WorkflowOut, summary="One workflow with its steps and attempts")
def get_workflow(request, workflow_id: UUID):
    workflow = _get_workflow(request, workflow_id)
    claims.touch(workflow, request.user)  # the holder's activity renews their claim
    return workflow_out(workflow)


class WaitOut(WorkflowOut):
    decision: Literal["approved", "rejected", "expired", "cancelled"] | None = Field(
        ..., description="How the plan left PLANNED, from its records; null while it awaits review"
    )


@api.get(
    "/workflows/{workflow_id}/wait",
    response=WaitOut,
    url_name="workflow_wait",
    summary="Wait for a decision or the end of a workflow, then answer with it",
    description="Answers as soon as the workflow reaches `until` (`decision`: any status but PLANNED; "
    "`terminal`: COMPLETE, REJECTED, EXPIRED, CANCELLED, FAILED, NEEDS_ATTENTION, COMPENSATED "
    "or COMPENSATION_FAILED), or with its current state after `timeout` seconds (1 to 60). "
    "Ask again to wait longer.",
)
def wait_for_workflow(
    request,
    workflow_id: UUID,
    until: waiting.Until = "decision",
    timeout: int = Query(waiting.DEFAULT_SECONDS, ge=1, le=waiting.MAX_SECONDS),
):
    workflow = waiting.wait_for(request, workflow_id, until, timeout, read=lambda: _get_workflow(request, workflow_id))
    if not isinstance(workflow, Workflow):
        return workflow  # parked: the front answers after a later pass
    return {**workflow_out(workflow), "decision": waiting.decision(workflow)}


def _seen(payload) -> Seen:
    return Seen(
        revision=payload.revision,
        plan_hash=payload.plan_hash,
        preview_digests=getattr(payload, "preview_digests", None),
        results_digest=getattr(payload, "results_digest", None),
    )


@api.post(
    "/workflows/{workflow_id}/approve",
    response=WorkflowOut,
    summary="Approve the revision of a plan you saw (reviewers, not its authors), binding its hash and the "
    "previews you were shown; 409 `stale_revision` when the plan changed since, `preview_pending` "
    "while a step that waits for its preview (every action that sends a request) has none, `preview_changed` "
    "when they changed since",
)
def approve_workflow(request, workflow_id: UUID, payload: ApprovalIn):
    # Who may approve, and what, is checked once, under the plan's lock.
    approvals.approve(workflow_id, by=request.user, seen=_seen(payload), comment=payload.comment)
    return workflow_out(_get_workflow(request, workflow_id))


class GateDecisionIn(DecisionIn):
    results_digest: Digest | None = Field(
        None,
        description="The digest of the results you were shown (`gate.results_digest`): required when steps "
        "ran before the gate (400 naming it), 409 `results_changed` if they changed since.",
    )


def _gate_step(workflow: Workflow, step_key: str):
    if not workflow.steps.filter(key=step_key, lane=0).exists():
        raise Http404
    return step_key


@api.post(
    "/workflows/{workflow_id}/steps/{step_key}/approve",
    response=WorkflowOut,
    summary="Approve the gate the workflow waits at before this step (reviewers, not the submitter); the run "
    "goes on once the gate's approvals are in",
)
def approve_gate(request, workflow_id: UUID, step_key: str, payload: GateDecisionIn):
    workflow = _get_workflow(request, workflow_id)
    gate_decisions.approve(
        workflow, _gate_step(workflow, step_key), by=request.user, seen=_seen(payload), comment=payload.comment
    )
    return workflow_out(_get_workflow(request, workflow_id))


@api.post(
    "/workflows/{workflow_id}/steps/{step_key}/reject",
    response=WorkflowOut,
    summary="Reject the gate: the workflow ends REJECTED, its completed steps can then be compensated",
)
def reject_gate(request, workflow_id: UUID, step_key: str, payload: GateDecisionIn):
    workflow = _get_workflow(request, workflow_id)
    gate_decisions.reject(
        workflow, _gate_step(workflow, step_key), by=request.user, seen=_seen(payload), comment=payload.comment
    )
    return workflow_out(_get_workflow(request, workflow_id))


@api.post(
    "/workflows/{workflow_id}/previews/retake",
    response=WorkflowOut,
    summary="Have a worker take the previews of the steps yet to run again (reviewers)",
)
def retake_workflow_previews(request, workflow_id: UUID):
    approvals.retake_previews(_get_workflow(request, workflow_id), by=request.user)
    return workflow_out(_get_workflow(request, workflow_id))


@api.post("/workflows/{workflow_id}/reject", response=WorkflowOut, summary="Reject a plan (reviewers)")
def reject_workflow(request, workflow_id: UUID, payload: DecisionIn):
    approvals.reject(workflow_id, by=request.user, seen=_seen(payload), comment=payload.comment)
    return workflow_out(_get_workflow(request, workflow_id))


# --- actions ----------------------------------------------------------------


class ActionOut(Schema):
    name: str
    idempotent: bool
    can_lookup: bool
    destructive: bool
    irreversible: bool
    compensation: str | None
    has_preview: bool
    args_schema: dict[str, Any] = Field(description="The JSON Schema of the action's args")


class ActionList(Schema):
    items: list[ActionOut]


@api.get("/actions", response=ActionList, summary="The installed actions, their flags and the schema of their args")
def list_actions(request):
    return {"items": catalog.catalog()}


# --- dead letters -----------------------------------------------------------


class DeadLetterOut(Schema):
    id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    failure_class: str
    attempt_count: int
    status: str
    trace_id: UUID
    created_at: datetime
    resolved_at: datetime | None
    resolved_by: str | None
    resolution_reason: str


class DeadLetterPage(Schema):
    items: list[DeadLetterOut]
    next: str | None


class CheckOut(Schema):
    name: str
    ok: bool
    detail: str


class ReplayPreviewOut(Schema):
    dead_letter_id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    operation_key: str
    args: dict[str, Any]
    checks: list[CheckOut]
    will_run: bool


class ReasonIn(Schema):
    reason: str = Field(..., max_length=2000)


def dead_letter_out(entry: DeadLetter) -> dict:
    return {
        "id": entry.pk,
        "workflow_id": entry.workflow_id,
        "step_key": entry.step_key,
        "action": entry.action,
        "failure_class": entry.failure_class,
        "attempt_count": entry.attempt_count,
        "status": entry.status,
        "trace_id": entry.trace_id,
        "created_at": entry.created_at,
        "resolved_at": entry.resolved_at,
        "resolved_by": entry.resolved_by.get_username() if entry.resolved_by else None,
        "resolution_reason": entry.resolution_reason,
    }


def _require(request, *allowed) -> None:
    if not any(roles.has_role(request.user, role) for role in allowed):
        raise NotAllowed("Your role does not allow this.")


def visible_dead_letters(user):
    """Operators and auditors see the dead letters of their teams; an agent
    (a user in no role) those of its own workflows. Reviewers have none to see."""
    if not (roles.is_operator(user) or roles.is_auditor(user)) and any(
        roles.has_role(user, role) for role in roles.ALL
    ):
        raise NotAllowed("Your role does not allow this.")
    return DeadLetter.objects.visible_to(user)


def _get_dead_letter(request, dead_letter_id: UUID) -> DeadLetter:
    entry = visible_dead_letters(request.user).select_related("resolved_by").filter(pk=dead_letter_id).first()
    if entry is None:
        raise Http404
    return entry


@api.get(
    "/dead-letters",
    response=DeadLetterPage,
    summary="List dead letters (operators, auditors; an agent, those of its own workflows)",
)
def list_dead_letters(
    request,
    workflow: UUID | None = None,
    status: DeadLetter.Status | None = None,
    action: str | None = None,
    failure_class: FailureClass | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
):
    entries = visible_dead_letters(request.user).select_related("resolved_by")
    if workflow:
        entries = entries.filter(workflow_id=workflow)
    if status:
        entries = entries.filter(status=status)
    if action:
        entries = entries.filter(action=action)
    if failure_class:
        entries = entries.filter(failure_class=failure_class)
    rows, next_cursor = page_by_created(entries, cursor, limit)
    return {"items": [dead_letter_out(e) for e in rows], "next": next_cursor}


AGE = re.compile(r"^([1-9][0-9]{0,5})([smhd])$")
AGE_UNITS = {"s": 1, "m": 60, "h": 3600, "d": 86400}


class DeadLetterFilterIn(Schema):
    """The GET list's query parameters, plus age, team, an explicit selection
    (`ids`) and the entries of an earlier bulk job (`job`). `status` may only
    say OPEN: nothing else is reconciled or replayed."""

    model_config = ConfigDict(extra="forbid")

    workflow: UUID | None = None
    status: DeadLetter.Status | None = None
    action: str | None = Field(None, min_length=1, max_length=64)
    failure_class: FailureClass | None = None
    older_than: str | None = Field(None, pattern=AGE.pattern, description="An age such as 30m, 12h or 90d")
    team: str | None = Field(None, min_length=1, max_length=64)
    ids: list[UUID] | None = Field(None, min_length=1, max_length=bulk.MAX_ITEMS)
    job: UUID | None = Field(None, description="The entries a bulk job of yours chose (still open)")

    def chosen(self) -> dict:
        """The selection, for `deadletters.matching`; a 400 when it chooses nothing or not OPEN."""
        if self.status not in (None, DeadLetter.Status.OPEN):
            raise DomainError(
                "Only open dead letters can be reconciled or replayed.",
                fields={"filter.status": "Only OPEN dead letters can be reconciled or replayed."},
            )
        older_than = None
        if self.older_than:
            number, unit = AGE.match(self.older_than).groups()
            older_than = timedelta(seconds=int(number) * AGE_UNITS[unit])
        chosen = {
            "workflow": self.workflow,
            "action": self.action,
            "failure_class": self.failure_class,
            "older_than": older_than,
            "team": self.team,
            "ids": self.ids,
            "job": self.job,
        }
        if not any(chosen.values()):
            message = (
                "Choose dead letters by workflow, action, failure_class, older_than, team, ids or job: "
                "never all of them at once."
            )
            raise DomainError(message, fields={"filter": message})
        return chosen

    def shown(self) -> dict:
        return self.model_dump(mode="json", exclude_none=True)


class BulkReplayIn(Schema):
    model_config = ConfigDict(extra="forbid")

    filter: DeadLetterFilterIn = Field(
        ..., description="At least one of workflow, action, failure_class, older_than, team, ids, job"
    )
    only: Literal["safe", "all"] = Field(
        "safe",
        description="safe: reconcile each entry just before its replay "
        "(applied ones are settled, in-doubt ones left for a person); "
        "all: replay each",
    )
    dry_run: StrictBool = Field(..., description="true: say what would be replayed and change nothing")
    reason: str = Field("", max_length=2000, description="Required unless dry_run")


class RefusalOut(Schema):
    id: UUID
    reason: str


class BulkReplayOut(Schema):
    dry_run: bool
    matched: int = Field(..., description="Open dead letters the filter chose")
    capped: bool = Field(
        ..., description=f"More match than one job takes ({bulk.MAX_ITEMS}): run it again for the rest"
    )
    job: UUID | None = Field(None, description="The replay job (GET /api/v1/jobs/{id}); null for a dry run")
    replayed: list[UUID] = Field([], description="Dry run: those that would be replayed")
    refused: list[RefusalOut] = Field([], description="Dry run: those current policy would refuse, and why")
    in_doubt: list[UUID] = Field([], description="Dry run, only=safe: no lookup and not idempotent, left alone")
    lookup_first: list[UUID] = Field([], description="Dry run, only=safe: looked up just before their replay")
    previews: list[ReplayPreviewOut] = Field(
        [], description=f"Dry run: exactly what each replay would run (the first {deadletters.MAX_BULK})"
    )


def _dry_replay(user, chosen: dict, only: str) -> dict:
    entries = list(deadletters.matching(user, **chosen).select_related("step")[: bulk.MAX_ITEMS + 1])
    found = {"dry_run": True, "matched": min(len(entries), bulk.MAX_ITEMS), "capped": len(entries) > bulk.MAX_ITEMS}
    entries = entries[: bulk.MAX_ITEMS]
    in_doubt, lookup_first = [], []
    if only == "safe":
        for entry in entries:
            action = actions.find(entry.action)
            sorted_ = bulk.sort_without_lookup(action, entry.step)
            if sorted_ is None:
                lookup_first.append(entry.pk)
            elif sorted_.state == bulk.State.IN_DOUBT:
                in_doubt.append(entry.pk)
    skipped = set(in_doubt)
    previews = deadletters.preview([entry for entry in entries if entry.pk not in skipped][: deadletters.MAX_BULK])
    return {
        **found,
        "in_doubt": in_doubt,
        "lookup_first": lookup_first,
        "replayed": [p.dead_letter.pk for p in previews if p.will_run],
        "refused": [
            {
                "id": p.dead_letter.pk,
                "reason": "Current policy does not allow this replay: " + "; ".join(policy.problems(p.checks)),
            }
            for p in previews
            if not p.will_run
        ],
        "previews": [p.as_dict() for p in previews],
    }


# Registered before /dead-letters/{id}, whose route would take "replay" for an id.
@api.post(
    "/dead-letters/replay",
    response={200: BulkReplayOut, 202: BulkReplayOut},
    summary="Replay the open dead letters a filter chooses (operators) in a job that workers advance in "
    "batches; dry_run answers what would be replayed (200), a replay answers 202 with its job",
)
def replay_dead_letters(request, payload: BulkReplayIn):
    _require(request, roles.OPERATORS)
    chosen = payload.filter.chosen()
    if payload.dry_run:
        return Status(200, _dry_replay(request.user, chosen, payload.only))
    job, beyond = bulk.replay(
        request.user, chosen, shown_filter=payload.filter.shown(), only=payload.only, reason=payload.reason
    )
    return Status(202, {"dry_run": False, "matched": job.items.count(), "capped": bool(beyond), "job": job.pk})


class ReconcileIn(Schema):
    model_config = ConfigDict(extra="forbid")

    filter: DeadLetterFilterIn = Field(..., description="As for the bulk replay")
    dry_run: StrictBool = Field(..., description="true: sort and count, settle nothing")


class ReconcileOut(Schema):
    job: UUID = Field(
        ..., description="The reconciliation (GET /api/v1/jobs/{id}): its counts grow as workers look entries up"
    )
    dry_run: bool
    matched: int
    capped: bool
    applied: int = Field(..., description="Found by lookup (settled, unless dry run)")
    safe: int = Field(..., description="Not found by lookup, or idempotent: safe to replay")
    in_doubt: int = Field(..., description="No lookup and not idempotent: for a person")
    pending: int = Field(..., description="Still to be looked up by a worker")


@api.post(
    "/dead-letters/reconcile",
    response={202: ReconcileOut},
    summary="Sort the open dead letters a filter chooses into applied / safe / in doubt (operators); "
    "workers look them up and settle the applied ones (not in a dry run)",
)
def reconcile_dead_letters(request, payload: ReconcileIn):
    _require(request, roles.OPERATORS)
    job, beyond = bulk.reconcile(
        request.user, payload.filter.chosen(), shown_filter=payload.filter.shown(), dry_run=payload.dry_run
    )
    counts = bulk.counts(job)
    return Status(
        202,
        {
            "job": job.pk,
            "dry_run": job.dry_run,
            "matched": counts["total"],
            "capped": bool(beyond),
            "applied": counts["applied"],
            "safe": counts["safe"],
            "in_doubt": counts["in_doubt"],
            "pending": counts["remaining"],
        },
    )


@api.get(
    "/dead-letters/{dead_letter_id}",
    response=DeadLetterOut,
    summary="One dead letter (operators, auditors; an agent, one of its own workflows)",
)
def get_dead_letter(request, dead_letter_id: UUID):
    return dead_letter_out(_get_dead_letter(request, dead_letter_id))


@api.get(
    "/dead-letters/{dead_letter_id}/preview",
    response=ReplayPreviewOut,
    summary="Exactly what a replay would run, and the policy checks as they stand now",
)
def preview_dead_letter(request, dead_letter_id: UUID):
    _require(request, roles.OPERATORS, roles.AUDITORS)
    entry = _get_dead_letter(request, dead_letter_id)
    return deadletters.preview([entry])[0].as_dict()


@api.post(
    "/dead-letters/{dead_letter_id}/replay",
    response={202: DeadLetterOut},
    summary="Replay with the original operation key (operators)",
)
def replay_dead_letter(request, dead_letter_id: UUID, payload: ReasonIn):
    _require(request, roles.OPERATORS)
    entry = _get_dead_letter(request, dead_letter_id)
    entry = deadletters.replay(entry, by=request.user, reason=payload.reason)
    return Status(202, dead_letter_out(entry))


@api.post(
    "/dead-letters/{dead_letter_id}/discard",
    response=DeadLetterOut,
    summary="Close without running anything (operators); the step stays DEAD_LETTERED",
)
def discard_dead_letter(request, dead_letter_id: UUID, payload: ReasonIn):
    _require(request, roles.OPERATORS)
    entry = _get_dead_letter(request, dead_letter_id)
    return dead_letter_out(deadletters.discard(entry, by=request.user, reason=payload.reason))


# --- bulk jobs ----------------------------------------------------------------


class JobSampleOut(Schema):
    dead_letter_id: UUID
    workflow_id: UUID
    step_key: str
    action: str
    operation_key: str
    detail: str


class JobOut(Schema):
    id: UUID
    kind: Literal["reconcile", "replay"]
    status: Literal["RUNNING", "PAUSED", "DONE"]
    dry_run: bool
    only: Literal["safe", "all"] | None
    filter: dict[str, Any]
    created_by: str
    created_at: datetime
    updated_at: datetime
    finished_at: datetime | None
    total: int
    done: int
    failed: int
    remaining: int
    applied: int
    safe: int
    in_doubt: int
    replayed: int
    samples: dict[str, list[JobSampleOut]] = Field(
        ..., description="A few entries of each group: applied, safe, in_doubt, replayed, failed"
    )


def job_out(job: Job) -> dict:
    return {
        "id": job.pk,
        "kind": job.kind,
        "status": job.status,
        "dry_run": job.dry_run,
        "only": job.only if job.kind == Job.Kind.REPLAY else None,
        "filter": job.filter,
        "created_by": job.created_by.get_username(),
        "created_at": job.created_at,
        "updated_at": job.updated_at,
        "finished_at": job.finished_at,
        **bulk.counts(job),
        "samples": bulk.samples(job),
    }


@api.get("/jobs/{job_id}", response=JobOut, summary="A bulk reconcile or replay and its progress (its operator)")
def get_job(request, job_id: UUID):
    return job_out(bulk.get_for_user(request.user, job_id))


@api.post("/jobs/{job_id}/pause", response=JobOut, summary="Pause a running bulk job (operators); 409 otherwise")
def pause_job(request, job_id: UUID):
    _require(request, roles.OPERATORS)
    return job_out(bulk.pause(bulk.get_for_user(request.user, job_id), by=request.user))


@api.post("/jobs/{job_id}/resume", response=JobOut, summary="Resume a paused bulk job (operators); 409 otherwise")
def resume_job(request, job_id: UUID):
    _require(request, roles.OPERATORS)
    return job_out(bulk.resume(bulk.get_for_user(request.user, job_id), by=request.user))


# --- compensations ----------------------------------------------------------


class CompensationRequestIn(Schema):
    reason: str = Field(..., max_length=2000)
    steps: list[str] | None = None


class DecisionReasonIn(Schema):
    reason: str = Field("", max_length=2000)


class CompensationDecisionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field("", max_length=2000)
    plan_hash: Digest = Field(
        ...,
        description="The compensation's `plan_hash` you saw (the digest of its undo "
        "steps and args): 409 `stale_revision` if it is not current",
    )


class UndoOut(Schema):
    compensates: str
    key: str
    action: str
    status: str | None
    operation_key: str | None


class IrreversibleOut(Schema):
    key: str
    action: str
    why: str


class CompensationOut(Schema):
    id: UUID
    workflow_id: UUID
    status: str
    requested_by: str
    authorized_by: str | None
    reason: str
    decision_reason: str
    plan_hash: str = Field(..., description="The digest of the undo steps and args it runs: what a decision names")
    steps: list[UndoOut]
    irreversible: list[IrreversibleOut]
    created_at: datetime


def compensation_out(comp: Compensation) -> dict:
    created = {s.key: s for s in comp.steps.all()}
    return {
        "id": comp.pk,
        "workflow_id": comp.workflow_id,
        "status": comp.status,
        "requested_by": comp.requested_by.get_username(),
        "authorized_by": comp.authorized_by.get_username() if comp.authorized_by else None,
        "reason": comp.reason,
        "decision_reason": comp.decision_reason,
        "plan_hash": compensation.current_hash(comp),
        "steps": [
            {
                **item,
                "status": created[item["key"]].status if item["key"] in created else None,
                "operation_key": created[item["key"]].operation_key if item["key"] in created else None,
            }
            for item in comp.plan
        ],
        "irreversible": comp.irreversible,
        "created_at": comp.created_at,
    }


def _get_compensation(request, compensation_id: UUID) -> Compensation:
    _require(request, roles.OPERATORS, roles.REVIEWERS, roles.AUDITORS)
    comp = (
        Compensation.objects.visible_to(request.user)
        .select_related("workflow", "requested_by", "authorized_by")
        .filter(pk=compensation_id)
        .first()
    )
    if comp is None:
        raise Http404
    return comp


@api.post(
    "/workflows/{workflow_id}/compensations",
    response={201: CompensationOut},
    summary="Request a compensation of completed steps (operators)",
)
def request_compensation(request, workflow_id: UUID, payload: CompensationRequestIn):
    _require(request, roles.OPERATORS)
    workflow = _get_workflow(request, workflow_id)
    comp = compensation.request(workflow, by=request.user, reason=payload.reason, step_keys=payload.steps)
    return Status(201, compensation_out(comp))


@api.get("/compensations/{compensation_id}", response=CompensationOut, summary="One compensation")
def get_compensation(request, compensation_id: UUID):
    return compensation_out(_get_compensation(request, compensation_id))


@api.post(
    "/compensations/{compensation_id}/authorize",
    response=CompensationOut,
    summary="Authorize a compensation (reviewers, not the requester)",
)
def authorize_compensation(request, compensation_id: UUID, payload: CompensationDecisionIn):
    comp = compensation.authorize(
        _get_compensation(request, compensation_id),
        by=request.user,
        seen=Seen(plan_hash=payload.plan_hash),
        reason=payload.reason,
    )
    return compensation_out(_get_compensation(request, comp.pk))


@api.post(
    "/compensations/{compensation_id}/decline",
    response=CompensationOut,
    summary="Decline a compensation (reviewers, not the requester)",
)
def decline_compensation(request, compensation_id: UUID, payload: CompensationDecisionIn):
    comp = compensation.decline(
        _get_compensation(request, compensation_id),
        by=request.user,
        seen=Seen(plan_hash=payload.plan_hash),
        reason=payload.reason,
    )
    return compensation_out(_get_compensation(request, comp.pk))


# --- action policies and their limits ----------------------------------------


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
    reason: str = Field(..., max_length=2000)
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


def _get_policy_change(request, change_id: UUID) -> PolicyChange:
    _require(request, roles.OPERATORS, roles.AUDITORS)
    found = PolicyChange.objects.select_related("requested_by", "decided_by").filter(pk=change_id).first()
    if found is None:
        raise Http404
    return found


@api.get(
    "/actions/{name}/policy",
    response=PolicyOut,
    summary="An action's policy and limits, steps in flight, pause, pending changes (operators, auditors)",
)
def get_policy(request, name: str):
    _require(request, roles.OPERATORS, roles.AUDITORS)
    return policy_out(policies.get(name))


@api.patch(
    "/actions/{name}/policy",
    response={200: PolicyOut, 202: PolicyChangeOut},
    summary="Change a policy (operators): 200 when it only tightens; 202 with the request a second "
    "operator must authorize when it loosens",
)
def patch_policy(request, name: str, payload: PolicyPatchIn):
    _require(request, roles.OPERATORS)
    body = payload.dict(exclude_unset=True)
    reason, version = body.pop("reason"), body.pop("version", None)
    result = policies.change(name, by=request.user, reason=reason, changes=body, version=version)
    if result.request is not None:
        return Status(202, policy_change_out(result.request))
    return policy_out(result.policy)


@api.get("/policy-changes/{change_id}", response=PolicyChangeOut, summary="One policy change request")
def get_policy_change(request, change_id: UUID):
    return policy_change_out(_get_policy_change(request, change_id))


@api.post(
    "/policy-changes/{change_id}/authorize",
    response=PolicyChangeOut,
    summary="Apply a loosening (operators, not the requester); 409 if the policy changed since",
)
def authorize_policy_change(request, change_id: UUID, payload: DecisionReasonIn):
    _require(request, roles.OPERATORS)
    found = policies.authorize(_get_policy_change(request, change_id), by=request.user, reason=payload.reason)
    return policy_change_out(_get_policy_change(request, found.pk))


@api.post(
    "/policy-changes/{change_id}/decline",
    response=PolicyChangeOut,
    summary="Decline a loosening (operators, not the requester)",
)
def decline_policy_change(request, change_id: UUID, payload: DecisionReasonIn):
    _require(request, roles.OPERATORS)
    found = policies.decline(_get_policy_change(request, change_id), by=request.user, reason=payload.reason)
    return policy_change_out(_get_policy_change(request, found.pk))


# --- the console's other actions: cancel, resolve, bulk replay, verify ---------


class ResolutionIn(Schema):
    model_config = ConfigDict(extra="forbid")

    decision: Literal["happened", "not_happened", "compensate"] = Field(
        ...,
        description="`happened`: record the evidence and go on; `not_happened`: run the step again with the "
        "same operation key; `compensate`: it happened and must be undone (requests a compensation)",
    )
    external_ref: str = Field("", max_length=200, description="Where it happened: required unless `not_happened`")
    result: dict[str, Any] | None = Field(None, description="The step's result as seen in the other system")
    reason: str = Field(..., max_length=2000)


@api.post(
    "/workflows/{workflow_id}/cancel",
    response=WorkflowOut,
    summary="Cancel a plan: its submitter while PLANNED, an operator once approved; no step starts after "
    "it, an effect in flight is recorded, completed steps can then be compensated",
)
def cancel_workflow(request, workflow_id: UUID, payload: ReasonIn):
    cancellation.cancel(_get_workflow(request, workflow_id), by=request.user, reason=payload.reason)
    return workflow_out(_get_workflow(request, workflow_id))


class StepEditIn(Schema):
    model_config = ConfigDict(extra="forbid")

    key: str = Field(..., max_length=64)
    args: dict[str, Any] = Field(
        ..., description="The step's new arguments, whole, as its action's model takes them (see GET /api/v1/actions)"
    )


class ReviseIn(Schema):
    model_config = ConfigDict(extra="forbid")

    steps: list[StepEditIn] = Field(..., min_length=1, max_length=50)
    comment: str = Field("", max_length=4000)
    revision: StrictInt = Field(
        ...,
        ge=1,
        description="The revision you edit: 409 `stale_revision` (with `current`) "
        "if it is no longer current, so two editors never overwrite "
        "each other",
    )


@api.post(
    "/workflows/{workflow_id}/revise",
    response=WorkflowOut,
    summary="Edit the arguments of steps of a plan awaiting review (reviewers): revision N+1 with a new plan "
    "hash; approvals of earlier revisions no longer count, and the editor cannot approve it",
)
def revise_workflow(request, workflow_id: UUID, payload: ReviseIn):
    steps = [{"key": step.key, "args": step.args} for step in payload.steps]
    revisions.revise(
        _get_workflow(request, workflow_id),
        by=request.user,
        revision=payload.revision,
        steps=steps,
        comment=payload.comment,
    )
    return workflow_out(_get_workflow(request, workflow_id))


class AssignIn(Schema):
    model_config = ConfigDict(extra="forbid")

    to: str = Field(..., min_length=1, max_length=150, description="The username of the reviewer to hand it to")


@api.post(
    "/workflows/{workflow_id}/claim",
    response=WorkflowOut,
    summary="Claim a plan awaiting a decision (\"I'm on it\"), or renew one's own claim; reviewers. "
    "A claim informs, never blocks, and lapses after REVIEW_CLAIM_MINUTES without activity",
)
def claim_workflow(request, workflow_id: UUID):
    claims.claim(_get_workflow(request, workflow_id), by=request.user)
    return workflow_out(_get_workflow(request, workflow_id))


@api.post("/workflows/{workflow_id}/release", response=WorkflowOut, summary="Release one's claim on a plan")
def release_workflow(request, workflow_id: UUID):
    claims.release(_get_workflow(request, workflow_id), by=request.user)
    return workflow_out(_get_workflow(request, workflow_id))


@api.post(
    "/workflows/{workflow_id}/assign",
    response=WorkflowOut,
    summary="Hand a plan that is unclaimed, or one's own, to another reviewer",
)
def assign_workflow(request, workflow_id: UUID, payload: AssignIn):
    claims.assign(_get_workflow(request, workflow_id), by=request.user, to=payload.to)
    return workflow_out(_get_workflow(request, workflow_id))


@api.post(
    "/workflows/{workflow_id}/steps/{step_key}/resolve",
    response=WorkflowOut,
    summary="Settle an in-doubt step with evidence (operators), as the console does",
)
def resolve_step(request, workflow_id: UUID, step_key: str, payload: ResolutionIn):
    workflow = _get_workflow(request, workflow_id)
    step = workflow.steps.filter(key=step_key).first()
    if step is None:
        raise Http404
    resolution.resolve(
        step,
        by=request.user,
        decision=payload.decision,
        reason=payload.reason,
        external_ref=payload.external_ref,
        result=payload.result,
    )
    return workflow_out(_get_workflow(request, workflow_id))


class ConfirmationIn(Schema):
    model_config = ConfigDict(extra="forbid")

    reason: str = Field(..., max_length=2000, description="What you checked")
    resolution_digest: str = Field(
        ..., max_length=64, description="The `digest` of the step's `resolution` you confirm"
    )


@api.post(
    "/workflows/{workflow_id}/steps/{step_key}/resolve/confirm",
    response=WorkflowOut,
    summary="Confirm an operator's answer for an in-doubt step whose result later steps read (reviewers and "
    "operators, not the one who gave it): it takes effect and the run goes on",
)
def confirm_resolution(request, workflow_id: UUID, step_key: str, payload: ConfirmationIn):
    workflow = _get_workflow(request, workflow_id)
    step = workflow.steps.filter(key=step_key).first()
    if step is None:
        raise Http404
    resolution.confirm(step, by=request.user, reason=payload.reason, digest=payload.resolution_digest)
    return workflow_out(_get_workflow(request, workflow_id))


class VerifyIn(Schema):
    model_config = ConfigDict(extra="forbid")

    workflow: UUID | None = Field(None, description="Only this workflow's chain (fast); omitted, every chain")


class VerificationOut(Schema):
    at: datetime
    by: str
    scope: str
    ok: bool
    events: int
    streams: int
    problem_count: int
    problems: list[str]
    seconds: float


@api.post(
    "/audit/verify",
    response=VerificationOut,
    summary="Recompute the audit chain now and record the check (auditors), as the console's Verify now",
)
def verify_audit(request, payload: VerifyIn):
    _require(request, roles.AUDITORS)
    if payload.workflow and not Workflow.objects.visible_to(request.user).filter(pk=payload.workflow).exists():
        raise Http404
    streams = [str(payload.workflow)] if payload.workflow else None
    check = journal.record_verification(by=request.user.get_username(), streams=streams)
    return {name: getattr(check, name) for name in VerificationOut.model_fields}


# --- audit ------------------------------------------------------------------

from workflows.web.pagination import page_by_id  # noqa: E402
from workflows.web.views_audit import event_row, select_events  # noqa: E402


class AuditEventOut(Schema):
    id: int
    stream: str
    seq: int
    at: str = Field(..., description="ISO-8601 UTC with microseconds, exactly as hashed")
    actor: str
    verb: str
    object_type: str
    object_id: str
    workflow_id: UUID | None
    data: dict[str, Any]
    prev_hash: str
    hash: str
    hash_alg: str = Field(
        ...,
        description="`hmac-sha256` (under the audit key `key_id`), or `sha256` for events written before keyed audit",
    )
    key_id: str
    subject: str = Field(..., description="The identity provider's subject of an SSO actor ('' otherwise)")
    issuer: str = Field(..., description="The identity provider (issuer) of an SSO actor")
    token_id: str = Field(..., description="The API token (its public prefix) an agent's request came with")
    client_address: str = Field(..., description="The client's address (X-Forwarded-For only from TRUSTED_PROXIES)")


class AuditEventPage(Schema):
    items: list[AuditEventOut]
    next: str | None


@api.get(
    "/audit",
    response=AuditEventPage,
    summary="Audit events, newest first (auditors); `since` inclusive, `until` exclusive, naive times are UTC",
)
def list_audit_events(
    request,
    workflow: UUID | None = None,
    actor: str = "",
    verb: str = "",
    since: datetime | None = None,
    until: datetime | None = None,
    cursor: str | None = None,
    limit: int = Query(100, ge=1, le=500),
):
    _require(request, roles.AUDITORS)
    events = select_events(request.user, actor=actor, verb=verb, workflow=workflow, since=since, until=until)
    rows, next_cursor = page_by_id(events, cursor, limit)
    return {"items": [event_row(event) for event in rows], "next": next_cursor}


# --- webhooks ---------------------------------------------------------------

from workflows.webhooks import delivery as webhook_delivery  # noqa: E402
from workflows.webhooks import endpoints as webhook_endpoints  # noqa: E402
from workflows.webhooks.events import EVENT_TYPES  # noqa: E402
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint  # noqa: E402


class WebhookEndpointIn(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str = Field(..., min_length=1, max_length=2048, description="https, or http to a loopback host")
    description: str = Field("", max_length=200)
    enabled: StrictBool = True
    team: str | None = Field(
        None,
        max_length=64,
        description="The team whose plans' events it receives: one of yours; omitted, your only team",
    )


class WebhookEndpointPatchIn(Schema):
    model_config = ConfigDict(extra="forbid")

    url: str | None = Field(None, min_length=1, max_length=2048)
    description: str | None = Field(None, max_length=200)
    enabled: StrictBool | None = None


class WebhookEndpointOut(Schema):
    id: UUID
    team: str
    url: str
    description: str
    enabled: bool
    created_by: str
    created_at: datetime


class WebhookEndpointCreatedOut(WebhookEndpointOut):
    secret: str = Field(..., description="`whsec_…`: shown this once; it signs every delivery to this endpoint")


class WebhookSecretOut(Schema):
    secret: str = Field(
        ...,
        description="`whsec_…`: shown this once; the previous secret keeps signing beside it "
        "for WEBHOOK_ROTATION_HOURS",
    )


class WebhookEndpointList(Schema):
    items: list[WebhookEndpointOut]


class WebhookDeliveryOut(Schema):
    id: UUID
    webhook_id: str = Field(..., description="The `webhook-id` header: the same on every attempt and replay")
    event: str
    workflow_id: UUID
    endpoint_id: UUID | None = Field(..., description="null: the plan's own callback_url")
    url: str
    status: str
    attempts: int
    next_attempt_at: datetime | None
    last_status_code: int | None
    last_error: str
    created_at: datetime
    delivered_at: datetime | None


class WebhookDeliveryPage(Schema):
    items: list[WebhookDeliveryOut]
    next: str | None


def webhook_endpoint_out(endpoint: WebhookEndpoint) -> dict:
    return {
        "id": endpoint.pk,
        "team": endpoint.team.name,
        "url": endpoint.url,
        "description": endpoint.description,
        "enabled": endpoint.enabled,
        "created_by": endpoint.created_by.get_username(),
        "created_at": endpoint.created_at,
    }


def webhook_delivery_out(row: WebhookDelivery) -> dict:
    return {
        "id": row.pk,
        "webhook_id": row.webhook_id,
        "event": row.event,
        "workflow_id": row.workflow_id,
        "endpoint_id": row.endpoint_id,
        "url": row.target_url,
        "status": row.status,
        "attempts": row.attempts - row.retry_base,
        "next_attempt_at": row.next_attempt_at,
        "last_status_code": row.last_status_code,
        "last_error": row.last_error,
        "created_at": row.created_at,
        "delivered_at": row.delivered_at,
    }


def _get_webhook_endpoint(request, endpoint_id: UUID) -> WebhookEndpoint:
    _require(request, roles.OPERATORS, roles.AUDITORS)
    endpoint = (
        WebhookEndpoint.objects.visible_to(request.user)
        .select_related("created_by", "team")
        .filter(pk=endpoint_id)
        .first()
    )
    if endpoint is None:
        raise Http404
    return endpoint


@api.post(
    "/webhooks",
    response={201: WebhookEndpointCreatedOut},
    summary="Register an endpoint for every event of one team's plans (operators); its signing secret is "
    "shown this once",
)
def create_webhook_endpoint(request, payload: WebhookEndpointIn):
    _require(request, roles.OPERATORS)
    endpoint, secret = webhook_endpoints.create(by=request.user, **payload.dict())
    return Status(201, {**webhook_endpoint_out(endpoint), "secret": secret})


@api.get("/webhooks", response=WebhookEndpointList, summary="Webhook endpoints (operators, auditors)")
def list_webhook_endpoints(request):
    _require(request, roles.OPERATORS, roles.AUDITORS)
    rows = (
        WebhookEndpoint.objects.visible_to(request.user)
        .select_related("created_by", "team")
        .order_by("created_at", "id")
    )
    return {"items": [webhook_endpoint_out(endpoint) for endpoint in rows]}


@api.get("/webhooks/{endpoint_id}", response=WebhookEndpointOut, summary="One webhook endpoint")
def get_webhook_endpoint(request, endpoint_id: UUID):
    return webhook_endpoint_out(_get_webhook_endpoint(request, endpoint_id))


@api.patch("/webhooks/{endpoint_id}", response=WebhookEndpointOut, summary="Change an endpoint (operators)")
def patch_webhook_endpoint(request, endpoint_id: UUID, payload: WebhookEndpointPatchIn):
    _require(request, roles.OPERATORS)
    changes = {name: value for name, value in payload.dict(exclude_unset=True).items() if value is not None}
    endpoint = webhook_endpoints.update(_get_webhook_endpoint(request, endpoint_id), by=request.user, changes=changes)
    return webhook_endpoint_out(endpoint)


@api.post(
    "/webhooks/{endpoint_id}/secret",
    response={201: WebhookSecretOut},
    summary="Rotate an endpoint's signing secret (operators); both sign during the overlap",
)
def rotate_webhook_secret(request, endpoint_id: UUID):
    _require(request, roles.OPERATORS)
    secret = webhook_endpoints.rotate_secret(_get_webhook_endpoint(request, endpoint_id), by=request.user)
    return Status(201, {"secret": secret})


@api.delete(
    "/webhooks/{endpoint_id}",
    response={204: None},
    summary="Remove an endpoint with its secrets and deliveries (operators)",
)
def delete_webhook_endpoint(request, endpoint_id: UUID):
    _require(request, roles.OPERATORS)
    webhook_endpoints.delete(_get_webhook_endpoint(request, endpoint_id), by=request.user)
    return Status(204, None)


@api.get(
    "/webhook-deliveries",
    response=WebhookDeliveryPage,
    summary="Webhook deliveries, newest first (operators, auditors); status=DEAD lists the dead-lettered",
)
def list_webhook_deliveries(
    request,
    status: WebhookDelivery.Status | None = None,
    event: str | None = None,
    workflow: UUID | None = None,
    endpoint: UUID | None = None,
    cursor: str | None = None,
    limit: int = Query(50, ge=1, le=200),
):
    _require(request, roles.OPERATORS, roles.AUDITORS)
    if event is not None and event not in EVENT_TYPES:
        raise ValidationError([{"loc": ("query", "event"), "msg": f"One of: {', '.join(EVENT_TYPES)}."}])
    rows = WebhookDelivery.objects.visible_to(request.user).select_related("endpoint")
    for name, value in (("status", status), ("event", event), ("workflow_id", workflow), ("endpoint_id", endpoint)):
        if value:
            rows = rows.filter(**{name: value})
    page, next_cursor = page_by_created(rows, cursor, limit)
    return {"items": [webhook_delivery_out(row) for row in page], "next": next_cursor}


@api.post(
    "/webhook-deliveries/{delivery_id}/replay",
    response={202: WebhookDeliveryOut},
    summary="Send a dead-lettered delivery again, same webhook-id and body (operators)",
)
def replay_webhook_delivery(request, delivery_id: UUID, payload: ReasonIn):
    _require(request, roles.OPERATORS)
    row = WebhookDelivery.objects.visible_to(request.user).select_related("endpoint").filter(pk=delivery_id).first()
    if row is None:
        raise Http404
    row = webhook_delivery.replay(row, by=request.user, reason=payload.reason)
    return Status(202, webhook_delivery_out(row))
