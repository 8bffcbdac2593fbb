"""Every error answers with one shape: {"error": {"code", "message", "fields"?}}."""

from functools import partial
from typing import Any

from django.db import OperationalError
from django.http import Http404
from ninja import Field, NinjaAPI, Schema
from ninja.errors import AuthenticationError, HttpError, ValidationError

from workflows.errors import DomainError
from workflows.operations import plans
from workflows.web import unavailable
from workflows.web.jsonparse import BadJSON


class CurrentOut(Schema):
    revision: int | None = Field(None, description="the plan's current revision (absent for a compensation)")
    plan_hash: str


class ErrorBody(Schema):
    code: str
    message: str
    fields: dict[str, str] | None = None
    current: CurrentOut | None = Field(None, description="with `stale_revision`: what is current now")
    line: int | None = Field(None, description="with a refused policy set: the line Cedar's message is about")
    policies: list[str] | None = Field(
        None, description="with `policy_forbidden` or `policy_error`: the @id of each policy concerned"
    )


class ErrorOut(Schema):
    error: ErrorBody


def body(code: str, message: str, fields: dict | None = None, details: dict | None = None) -> dict[str, Any]:
    """The error object: what `{"error": ...}` holds."""
    found: dict[str, Any] = {"code": code, "message": message}
    if fields:
        found["fields"] = fields
    found.update(details or {})
    return found


def error(
    api: NinjaAPI,
    request,
    status: int,
    code: str,
    message: str,
    fields: dict | None = None,
    details: dict | None = None,
):
    return api.create_response(request, {"error": body(code, message, fields, details)}, status=status)


def of_domain_error(exc: DomainError) -> dict[str, Any]:
    """The error object a refused operation answers with: the one an
    endpoint answers alone, and one item of a bulk call answers within it."""
    return body(exc.code, exc.message, exc.fields, exc.details)


def _field_path(loc) -> str:
    parts = [str(p) for p in loc]
    # ninja reports ("body", "<param name>", ...field path)
    if len(parts) > 2 and parts[0] == "body":
        parts = parts[2:]
    elif parts and parts[0] in ("body", "query", "path"):
        parts = parts[1:]
    return ".".join(parts) or "body"


def on_validation_error(api, request, exc: ValidationError):
    fields = {}
    for item in exc.errors:
        fields.setdefault(_field_path(item.get("loc", ())), item.get("msg", "Invalid value."))
    return error(api, request, 400, "invalid", "The request is not valid.", fields)


def on_auth_error(api, request, exc):
    return error(api, request, 401, "unauthorized", "A valid bearer token is required.")


def on_domain_error(api, request, exc: DomainError):
    return api.create_response(request, {"error": of_domain_error(exc)}, status=exc.status)


def on_plan_invalid(api, request, exc: plans.PlanInvalid):
    return error(api, request, 400, "invalid", "The plan is not valid.", exc.fields)


def on_conflict(api, request, exc):
    return error(api, request, 409, "conflict", str(exc))


def on_not_found(api, request, exc):
    return error(api, request, 404, "not_found", "No such object.")


def on_http_error(api, request, exc: HttpError):
    code = {400: "invalid", 401: "unauthorized", 403: "forbidden", 404: "not_found"}.get(exc.status_code, "error")
    # ninja words every body the parser refused "Cannot parse request body"; the parser says why.
    message = str(exc.__cause__) if isinstance(exc.__cause__, BadJSON) else str(exc)
    return error(api, request, exc.status_code, code, message)


def on_operational_error(api, request, exc: OperationalError):
    """No connection to be had is a 503 with Retry-After; any other error goes on as it would."""
    if unavailable.no_connection(exc):
        return unavailable.refusal(request)
    raise exc


HANDLERS = {
    ValidationError: on_validation_error,
    AuthenticationError: on_auth_error,
    DomainError: on_domain_error,
    plans.PlanInvalid: on_plan_invalid,
    plans.SubmissionConflict: on_conflict,
    Http404: on_not_found,
    HttpError: on_http_error,
    OperationalError: on_operational_error,
}


def install(api: NinjaAPI) -> None:
    """Answer each of these errors in the one shape, rendered by `api`."""
    for exc_class, handler in HANDLERS.items():
        api.add_exception_handler(exc_class, partial(handler, api))
