"""What changed since a reviewer looked: where a stale page's decision goes
(`web.seen`). It shows the changes from the revision the page showed to the
current one, and a decision form for the current one."""

from __future__ import annotations

from uuid import UUID

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from workflows.operations import revisions
from workflows.web.views.detail import detail_context, get_workflow_for_user
from workflows.web.views.plans import with_review_facts


def _plan_of(workflow, number: int) -> list[dict] | None:
    if number == workflow.revision:
        return workflow.plan
    row = workflow.revisions.filter(number=number).first()
    return row.plan if row is not None else None


@login_required
@require_GET
def workflow_changed(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = with_review_facts([get_workflow_for_user(request, workflow_id)])[0]
    raw = request.GET.get("seen", "")
    seen = int(raw) if raw.isdigit() and len(raw) < 10 else None
    before = _plan_of(workflow, seen) if seen is not None else None
    changes = revisions.diff(before, workflow.plan) if before is not None and seen != workflow.revision else []
    return render(
        request,
        "workflows/workflow_changed.html",
        {**detail_context(request, workflow), "seen_revision": seen, "changes": changes, "known": before is not None},
    )
