"""The auditors' view of the audit trail: browse, export, verify.

Read-only apart from recording a verification. Lists page by id (keyset,
newest first) over the (actor, id), (verb, id), (workflow_id, id) and at
indexes: no page counts the table or pays for an OFFSET, and exports stream
in chunks instead of loading the trail into memory.
"""

import csv
import json
from collections.abc import Iterator
from datetime import UTC
from urllib.parse import urlencode
from uuid import UUID

from django import forms
from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.http import HttpRequest, HttpResponse, HttpResponseBadRequest, JsonResponse, StreamingHttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.cache import cache_control
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from workflows import roles
from workflows.audit import journal, signing
from workflows.audit.reading import FIELDS, event_row, select_events
from workflows.db import canonical_json
from workflows.errors import DomainError
from workflows.models import AuditEvent, AuditVerification, Workflow
from workflows.web.pages import reads
from workflows.web.pagination import page_by_id

PAGE_SIZE = 100
EXPORT_CHUNK = 2000
# A spreadsheet runs a cell that starts with one of these as a formula (OWASP "CSV injection").
FORMULA_START = ("=", "+", "-", "@", "\t", "\r")


class AuditFilter(forms.Form):
    actor = forms.CharField(required=False, max_length=150)
    verb = forms.CharField(required=False, max_length=64, help_text="Exact, e.g. workflow.approved")
    workflow = forms.UUIDField(
        required=False, label="Workflow id", error_messages={"invalid": "Enter a workflow id (a UUID)."}
    )
    since = forms.DateTimeField(
        required=False,
        label="From (UTC)",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
    )
    until = forms.DateTimeField(
        required=False,
        label="To (UTC)",
        help_text="Events before this time",
        widget=forms.DateTimeInput(attrs={"type": "datetime-local", "step": "1"}, format="%Y-%m-%dT%H:%M:%S"),
    )

    def __init__(self, data, user):
        super().__init__(data, label_suffix="")
        self.user = user
        self.is_valid()

    def clean(self):
        cleaned = super().clean()
        since, until = cleaned.get("since"), cleaned.get("until")
        if since and until and until <= since:
            self.add_error("until", "“To” must be after “From”.")
        return cleaned

    def events(self):
        """The matching events; none at all while the filter is invalid, so a
        mistyped value never shows (or exports) more than was asked for."""
        if self.errors:
            return AuditEvent.objects.none()
        return select_events(self.user, **{name: self.cleaned_data[name] for name in self.fields})

    def querystring(self) -> str:
        return urlencode({name: value for name in self.fields if (value := self.data.get(name, "").strip())})

    def problems(self) -> list[str]:
        return [f"{self[name].label}: {error}" for name, errors in self.errors.items() for error in errors]


def _check_auditor(user) -> None:
    if not roles.is_auditor(user):
        raise PermissionDenied("Auditors only.")


def _with_data_text(events: list[AuditEvent]) -> list[AuditEvent]:
    for event in events:
        event.data_text = canonical_json(event.data)
    return events


def _chain_context(request: HttpRequest, workflow: UUID | None) -> dict:
    """The chain's checks and the button to check it now: an auditor's (a
    superuser who is none reads the page without them)."""
    if not roles.is_auditor(request.user):
        return {"can_verify": False}
    latest = AuditVerification.objects.order_by("-id")
    if workflow and not Workflow.objects.visible_to(request.user).filter(pk=workflow).exists():
        workflow = None  # another team's: neither its checks nor a button to check it
    return {
        "whole": latest.filter(scope="").first(),
        "workflow_check": latest.filter(scope=str(workflow)).first() if workflow else None,
        "verify_workflow": workflow,
        "can_verify": True,
    }


@login_required
@require_GET
@vary_on_headers("HX-Request")
def audit_list(request: HttpRequest) -> HttpResponse:
    reads(request, "audit")
    filters = AuditFilter(request.GET, request.user)
    try:
        rows, next_cursor = page_by_id(filters.events(), request.GET.get("cursor") or None, PAGE_SIZE)
    except DomainError as exc:
        return HttpResponseBadRequest(exc.message)
    context = {
        "filters": filters,
        "events": _with_data_text(rows),
        "next_cursor": next_cursor,
        "paged": bool(request.GET.get("cursor")),
        "query": filters.querystring(),
        **_chain_context(request, None if filters.errors else filters.cleaned_data["workflow"]),
    }
    # A history restore after hx-push-url needs the whole page, not the rows.
    partial = request.htmx and not request.htmx.history_restore_request
    return render(request, "workflows/audit_list.html#results" if partial else "workflows/audit_list.html", context)


@login_required
@require_POST
def audit_verify(request: HttpRequest) -> HttpResponse:
    """Check the chain now: only the filtered workflow's stream (fast) when one
    is given, else every stream."""
    _check_auditor(request.user)
    filters = AuditFilter(request.POST, request.user)
    workflow = None if filters.errors else filters.cleaned_data["workflow"]
    if filters.errors:
        messages.error(request, "Not verified: " + "; ".join(filters.problems()))
    elif workflow and not Workflow.objects.visible_to(request.user).filter(pk=workflow).exists():
        messages.error(request, "Not verified: no such workflow.")
        workflow = None
    else:
        check = journal.record_verification(
            by=request.user.get_username(), streams=[str(workflow)] if workflow else None
        )
        scope = f"workflow {workflow}" if workflow else "whole chain"
        summary = f"{check.events} events in {check.streams} chains"
        if check.ok:
            messages.success(request, f"Audit chain OK ({scope}): {summary}.")
        else:
            messages.error(request, f"Audit chain BROKEN ({scope}): {check.problem_count} problem(s) in {summary}.")
    if request.htmx:
        return render(request, "workflows/audit_list.html#chain", _chain_context(request, workflow))
    query = urlencode({"workflow": workflow}) if workflow else ""
    return redirect(reverse("audit_list") + (f"?{query}" if query else ""))


class _Echo:
    """A file-like object whose write() hands the line back to csv.writer's caller."""

    def write(self, value: str) -> str:
        return value


def _cell(value) -> str:
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


def _csv_lines(rows: Iterator[dict]) -> Iterator[str]:
    """`data` as JSON text, and any cell a spreadsheet would run as a formula
    prefixed with an apostrophe (the JSON Lines export keeps values exact)."""
    writer = csv.writer(_Echo())
    yield writer.writerow(FIELDS)
    for row in rows:
        row["data"] = canonical_json(row["data"])
        yield writer.writerow([_cell(row[name]) for name in FIELDS])


def _jsonl_lines(rows: Iterator[dict]) -> Iterator[str]:
    for row in rows:
        yield json.dumps(row, ensure_ascii=False) + "\n"


def _export(request: HttpRequest, lines, content_type: str, extension: str) -> HttpResponse:
    """Stream every matching event, oldest first, in chunks: memory stays flat
    however long the trail is."""
    reads(request, "audit")
    filters = AuditFilter(request.GET, request.user)
    if filters.errors:
        return HttpResponseBadRequest(
            "The filter is not valid: " + "; ".join(filters.problems()), content_type="text/plain; charset=utf-8"
        )
    events = filters.events().order_by("id").iterator(chunk_size=EXPORT_CHUNK)
    response = StreamingHttpResponse(lines(event_row(event) for event in events), content_type=content_type)
    stamp = timezone.now().astimezone(UTC).strftime("%Y%m%dT%H%M%SZ")
    response["Content-Disposition"] = f'attachment; filename="audit-{stamp}.{extension}"'
    return response


@login_required
@require_GET
def audit_export_csv(request: HttpRequest) -> HttpResponse:
    return _export(request, _csv_lines, "text/csv; charset=utf-8", "csv")


@login_required
@require_GET
def audit_export_jsonl(request: HttpRequest) -> HttpResponse:
    return _export(request, _jsonl_lines, "application/x-ndjson; charset=utf-8", "jsonl")


@require_GET
@cache_control(public=True, max_age=300)
def jwks(request: HttpRequest) -> JsonResponse:
    """The public signing keys (no login): whoever holds a checkpoint file,
    and later an approval proof, checks its signature with them."""
    return JsonResponse(signing.jwks())
