"""The JSON API (DESIGN §12): agents submit plans; people decide over HTTP."""

from datetime import datetime
from typing import Any
from uuid import UUID

from django.http import Http404, HttpRequest
from ninja import Field, NinjaAPI, Query, Schema, Status
from ninja.errors import AuthenticationError, HttpError, ValidationError
from ninja.security import HttpBearer

from workflows import approvals, plans, tokens
from workflows.errors import DomainError
from workflows.models import Workflow
from workflows.pagination import page_by_created
from workflows.states import WorkflowStatus


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = tokens.authenticate(token)
        if user is not None:
            request.user = user
        return user


api = NinjaAPI(
    title="Durable Console API",
    version="1",
    auth=BearerToken(),
    urls_namespace="api",
    openapi_url="/openapi.json",
    docs_url="/docs",
)


# --- errors: always {"error": {"code", "message", "fields"?}} ---------------


class ErrorBody(Schema):
    code: str
    message: str
    fields: dict[str, str] | None = None


class ErrorOut(Schema):
    error: ErrorBody


def error(request, status: int, code: str, message: str, fields: dict | None = None):
    body: dict[str, Any] = {"code": code, "message": message}
    if fields:
        body["fields"] = fields
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
    return error(request, exc.status, exc.code, exc.message)


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
    return error(request, exc.status_code, "error", str(exc))


# --- schemas --------------------------------------------------------------

Text = Field(..., min_length=1, max_length=200)


class CompensationIn(Schema):
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)


class StepIn(Schema):
    key: str = Field(..., min_length=1, max_length=64)
    action: str = Field(..., min_length=1, max_length=64)
    args: dict[str, Any] = Field(default_factory=dict)
    compensation: CompensationIn | None = None


class PlanIn(Schema):
    name: str = Text
    submission_key: str = Text
    deadline_seconds: int | None = None
    context: dict[str, Any] | None = None
    steps: list[StepIn] = Field(..., min_length=1)


class AttemptOut(Schema):
    number: int
    status: str
    failure_class: str | None
    started_at: datetime
    finished_at: datetime | None


class StepOut(Schema):
    key: str
    action: str
    status: str
    operation_key: str
    external_ref: str | None
    result: dict[str, Any] | None
    attempts: list[AttemptOut]


class WorkflowOut(Schema):
    id: UUID
    name: str
    status: str
    plan_hash: str
    submitted_by: str
    deadline: datetime
    created_at: datetime
    updated_at: datetime
    steps: list[StepOut]


class WorkflowPage(Schema):
    items: list[WorkflowOut]
    next: str | None


class DecisionIn(Schema):
    comment: str = Field("", max_length=4000)


def workflow_out(workflow: Workflow) -> dict:
    return {
        "id": workflow.pk,
        "name": workflow.name,
        "status": workflow.status,
        "plan_hash": workflow.plan_hash,
        "submitted_by": workflow.submitted_by.get_username(),
        "deadline": workflow.deadline,
        "created_at": workflow.created_at,
        "updated_at": workflow.updated_at,
        "steps": [
            {
                "key": step.key,
                "action": step.action,
                "status": step.status,
                "operation_key": step.operation_key,
                "external_ref": step.external_ref or None,
                "result": step.result,
                "attempts": [
                    {
                        "number": a.number,
                        "status": a.status,
                        "failure_class": a.failure_class or None,
                        "started_at": a.started_at,
                        "finished_at": a.finished_at,
                    }
                    for a in step.attempts.all()
                ],
            }
            for step in workflow.steps.all()
        ],
    }


def visible_workflows(user):
    return Workflow.objects.visible_to(user).select_related("submitted_by").prefetch_related("steps__attempts")


def _get_workflow(request, workflow_id: UUID) -> Workflow:
    workflow = visible_workflows(request.user).filter(pk=workflow_id).first()
    if workflow is None:
        raise Http404
    return workflow


# --- endpoints ------------------------------------------------------------


@api.post("/workflows", response={200: WorkflowOut, 201: WorkflowOut}, summary="Submit a plan")
def submit_workflow(request, payload: PlanIn):
    submission = plans.submit(request.user, payload.dict())
    workflow = _get_workflow(request, submission.workflow.pk)
    return Status(201 if submission.created else 200, workflow_out(workflow))


@api.get("/workflows", response=WorkflowPage, summary="List workflows, newest first")
def list_workflows(request, status: WorkflowStatus | None = None, cursor: str | None = None,
                   limit: int = Query(50, ge=1, le=200)):
    workflows = visible_workflows(request.user)
    if status:
        workflows = workflows.filter(status=status)
    rows, next_cursor = page_by_created(workflows, cursor, limit)
    return {"items": [workflow_out(w) for w in rows], "next": next_cursor}


@api.get("/workflows/{workflow_id}", response=WorkflowOut, summary="One workflow with its steps and attempts")
def get_workflow(request, workflow_id: UUID):
    return workflow_out(_get_workflow(request, workflow_id))


@api.post("/workflows/{workflow_id}/approve", response=WorkflowOut, summary="Approve a plan (reviewers)")
def approve_workflow(request, workflow_id: UUID, payload: DecisionIn):
    workflow = _get_workflow(request, workflow_id)
    approvals.approve(workflow, by=request.user, comment=payload.comment)
    return workflow_out(_get_workflow(request, workflow_id))


@api.post("/workflows/{workflow_id}/reject", response=WorkflowOut, summary="Reject a plan (reviewers)")
def reject_workflow(request, workflow_id: UUID, payload: DecisionIn):
    workflow = _get_workflow(request, workflow_id)
    approvals.reject(workflow, by=request.user, comment=payload.comment)
    return workflow_out(_get_workflow(request, workflow_id))
