"""A workflow's page: the plan, its steps and attempts, the timeline, who
handles it and what this user may do; and the helpers every view about one
workflow uses to fetch it for the user and answer with its page or partial."""

from uuid import UUID

from django.contrib.auth import get_user_model
from django.contrib.auth.decorators import login_required
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import get_object_or_404, render
from django.urls import reverse
from django.utils import timezone
from django.views.decorators.http import require_GET

from workflows import persons, roles
from workflows.audit import archived
from workflows.engine import gates, policy
from workflows.models import AuditEvent, Step, Workflow
from workflows.operations import cancellation, claims, compensation, revisions
from workflows.states import TERMINAL_WORKFLOW, PreviewState, StepStatus, WorkflowStatus
from workflows.web import arguments, gate_form


def get_workflow_for_user(request: HttpRequest, workflow_id: UUID) -> Workflow:
    return get_object_or_404(
        Workflow.objects.visible_to(request.user).select_related("submitted_by", "team"), pk=workflow_id
    )


def detail_url(workflow: Workflow) -> str:
    return detail_path(workflow.pk)


def detail_path(workflow_id: UUID) -> str:
    return reverse("workflow_detail", kwargs={"workflow_id": workflow_id})


def live(request: HttpRequest, workflow: Workflow) -> HttpResponse:
    workflow.refresh_from_db()
    return render(request, "workflows/workflow_detail.html#live", detail_context(request, workflow))


@login_required
@require_GET
def workflow_detail(request: HttpRequest, workflow_id: UUID) -> HttpResponse:
    workflow = (
        Workflow.objects.visible_to(request.user).select_related("submitted_by", "team").filter(pk=workflow_id).first()
    )
    if workflow is None:
        # Moved out by `manage.py archive`: say so (410), to those who saw it, as the API does.
        record = archived.archived_record(request.user, workflow_id)
        if record is None:
            raise Http404("No such workflow.")
        return render(
            request, "workflows/archived.html", {"record": record, "message": archived.describe(record)}, status=410
        )
    context = detail_context(request, workflow)
    if not request.htmx:  # the holder opening the plan renews their claim; the page's polling does not
        claims.touch(workflow, request.user)
        context["changed_since"] = _changed_since_last_seen(request, workflow)
    template = "workflows/workflow_detail.html#live" if request.htmx else "workflows/workflow_detail.html"
    return render(request, template, context)


def _changed_since_last_seen(request: HttpRequest, workflow: Workflow) -> dict | None:
    """What changed since this reviewer last opened the plan (the revision
    their session last showed them), else since the revision before; and
    remember that they have now seen this one."""
    seen = request.session.get("seen_revisions", {})
    last = seen.get(str(workflow.pk))
    seen[str(workflow.pk)] = workflow.revision
    request.session["seen_revisions"] = dict(list(seen.items())[-200:])  # a bounded memory
    if workflow.revision == 1 or workflow.status != WorkflowStatus.PLANNED:
        return None
    since = last if isinstance(last, int) and 1 <= last < workflow.revision else workflow.revision - 1
    rows = {row.number: row for row in workflow.revisions.filter(number__in=[since, workflow.revision])}
    if since not in rows or workflow.revision not in rows:
        return None
    return {
        "number": workflow.revision,
        "since": since,
        "by": rows[workflow.revision].by.get_username(),
        "last_seen": since == last,
        "changes": revisions.diff(rows[since].plan, rows[workflow.revision].plan),
    }


def _approval_progress(workflow: Workflow) -> dict:
    """Distinct approvals that still count, of those the plan needs: a
    2-of-2 plan stays PLANNED after the first one."""
    plan_policies = policy.plan_rules(workflow)
    return {
        "counted": len(policy.valid_approvals(workflow, plan_policies)),
        "required": policy.approvals_required(plan_policies),
    }


TIMELINE_WIDTH = 800
ROW_HEIGHT = 22


def timeline(steps) -> dict | None:
    """Geometry of the step/attempt timeline: one row per step, one bar per
    attempt placed by its start and end, so retries and waits show as gaps."""
    attempts = [a for step in steps for a in step.attempts.all()]
    if not attempts:
        return None
    now = timezone.now()
    start = min(a.started_at for a in attempts)
    end = max(a.finished_at or now for a in attempts)
    span = max((end - start).total_seconds(), 0.001)
    label_width = 160
    scale = (TIMELINE_WIDTH - label_width - 10) / span
    rows = []
    for index, step in enumerate(steps):
        bars = []
        for attempt in step.attempts.all():
            begin = (attempt.started_at - start).total_seconds()
            length = ((attempt.finished_at or now) - attempt.started_at).total_seconds()
            bars.append(
                {
                    "x": round(label_width + begin * scale, 1),
                    "w": max(round(length * scale, 1), 2),
                    "status": attempt.status.lower(),
                    "number": attempt.number,
                    "ms": int(length * 1000),
                    "failure_class": attempt.failure_class,
                    "offset_ms": int(begin * 1000),
                }
            )
        rows.append({"y": index * ROW_HEIGHT, "label": step.key, "bars": bars, "retries": max(len(bars) - 1, 0)})
    return {
        "rows": rows,
        "width": TIMELINE_WIDTH,
        "height": len(rows) * ROW_HEIGHT + 20,
        "span_ms": int(span * 1000),
        "label_width": label_width,
        "axis_y": len(rows) * ROW_HEIGHT + 14,
    }


def _with_arguments_and_previews(steps: list[Step]) -> None:
    """Each step's labelled arguments (a `$from` with the value it took once
    its step has a result) and preview, for the templates."""
    results = {step.key: step.result for step in steps if step.lane == 0 and step.result is not None}
    for step in steps:
        step.fields = arguments.fields(step.action, step.args, results if step.lane == 0 else {})
        step.shown_preview = arguments.preview_of(step)
        step.is_blocked = step.status == StepStatus.BLOCKED


def _with_proofs(steps: list[Step]) -> None:
    """Each attempt's approval proof as the page shows it: the key id, and
    the approvers it names (by opaque id: the account's primary key) with
    their user names; an approval no person made by its basis."""
    for step in steps:
        step.attempt_rows = list(step.attempts.all())
    subs = {
        approver["sub"] for step in steps for attempt in step.attempt_rows for approver in attempt.proof_approvers or []
    }
    names = (
        {
            str(pk): name
            for pk, name in get_user_model()
            .objects.filter(pk__in=[sub for sub in subs if sub.isdigit()])
            .values_list("pk", "username")
        }
        if subs
        else {}
    )
    for step in steps:
        for attempt in step.attempt_rows:
            attempt.proof_names = [
                {"name": names.get(a["sub"], f"#{a['sub']}" if a["sub"].isdigit() else a["sub"]), "at": a["at"]}
                for a in attempt.proof_approvers or []
            ]


def _with_pending_resolutions(steps: list[Step], user) -> None:
    """An operator's answer waiting for a second person, and whether this
    user may confirm it (`operations.resolution`)."""
    may_confirm = roles.is_reviewer(user) or roles.is_operator(user)
    for step in steps:
        step.pending = None
        if step.proposed_resolution is not None:
            mine = persons.same(step.proposed_by, user)
            step.pending = {
                **step.proposed_resolution,
                "by": step.proposed_by.get_username(),
                "mine": mine,
                "digest": step.proposal_digest(),
                "can_confirm": may_confirm and not mine,
            }


def detail_context(request: HttpRequest, workflow: Workflow) -> dict:
    steps = list(workflow.steps.select_related("proposed_by").prefetch_related("attempts"))
    _with_arguments_and_previews(steps)
    _with_proofs(steps)
    _with_pending_resolutions(steps, request.user)
    events = AuditEvent.objects.filter(workflow_id=workflow.pk).order_by("-id")[:200]
    compensations = list(workflow.compensations.select_related("requested_by", "authorized_by").order_by("-lane"))
    reviewer = roles.is_reviewer(request.user) and not persons.same(request.user, workflow.submitted_by_id)
    blocked = workflow.status == WorkflowStatus.FAILED and any(step.status == StepStatus.BLOCKED for step in steps)
    awaiting = workflow.status == WorkflowStatus.PLANNED or blocked
    return {
        "workflow": workflow,
        "steps": steps,
        "timeline": timeline(steps),
        "compensations": compensations,
        "can_request_compensation": (
            roles.is_operator(request.user)
            and not workflow.restored_at
            and workflow.status in compensation.COMPENSABLE_WORKFLOW
            and not any(c.status in compensation.OPEN for c in compensations)
            and any(step.lane == 0 and step.status == StepStatus.COMPLETE for step in steps)
        ),
        "can_cancel": cancellation.may_cancel(workflow, request.user),
        **_claim_context(request, workflow, reviewer and awaiting),
        **_gate_context(workflow, steps, reviewer),
        "revisions": revisions.history(workflow) if workflow.revision > 1 else [],
        "can_revise": reviewer and workflow.status == WorkflowStatus.PLANNED,
        "co_author": workflow.status == WorkflowStatus.PLANNED
        and workflow.revision > 1
        and persons.among(request.user, persons.plan_authors([workflow])[workflow.pk] - {workflow.submitted_by_id}),
        "events": events,
        "approvals": workflow.approvals.select_related("reviewer"),
        "approval_progress": _approval_progress(workflow) if workflow.status == WorkflowStatus.PLANNED else None,
        # Not while it waits for a person: their half-typed reason would be replaced under their hands.
        "live": workflow.status not in TERMINAL_WORKFLOW
        and workflow.status not in (WorkflowStatus.PLANNED, WorkflowStatus.NEEDS_ATTENTION),
        "can_decide": workflow.status == WorkflowStatus.PLANNED and reviewer,
        # A step blocked by the policy recheck goes on only with a fresh approval.
        "can_reapprove": blocked and reviewer,
        # The form whose approval binds the previews shown (each READY one
        # carries its digest into it).
        "decision_form": "decision-form" if awaiting and reviewer else None,
        "can_retake_previews": awaiting
        and reviewer
        and any(
            step.lane == 0
            and step.status in (StepStatus.PENDING, StepStatus.BLOCKED)
            and step.preview_state in (PreviewState.READY, PreviewState.FAILED)
            for step in steps
        ),
        # While a worker takes them, the steps are looked at again until every preview is in.
        "previews_pending": workflow.status == WorkflowStatus.PLANNED
        and any(step.preview_state == PreviewState.PENDING for step in steps),
    }


def _gate_context(workflow: Workflow, steps: list[Step], reviewer: bool) -> dict:
    """The gate the workflow waits at: its note, its approvals so far, and
    the digest of the results above it, which a reviewer's approval binds."""
    step = next((s for s in steps if s.lane == 0 and s.status == StepStatus.WAITING_GATE), None)
    if workflow.status != WorkflowStatus.WAITING_GATE or step is None:
        return {"gate": None}
    valid = gates.valid_approvals(step, workflow)
    return {
        "gate": {
            "step": step,
            "note": (step.gate or {}).get("note", ""),
            # A typed gate's form (docs/explanation/review.md#typed-decisions).
            "typed": gate_form.form_context(step.gate, gates.standing(valid)),
            "approvals": len(valid),
            "required": gates.required(step),
            "results_digest": gates.results_digest(step),
            "can_decide": reviewer,
        }
    }


def _claim_context(request: HttpRequest, workflow: Workflow, may_review: bool) -> dict:
    """Who handles the plan, and what this user may do about it."""
    holder = claims.holder(workflow)
    mine = holder is not None and holder.pk == request.user.pk
    free = holder is None or mine
    return {
        "holder": holder,
        "claim_expires_at": claims.expires_at(workflow) if holder else None,
        "held_by_another": may_review and holder is not None and not mine,
        "can_claim": may_review and holder is None,
        "can_release": mine,
        "can_assign": may_review and free,
        "assignees": list(claims.assignees(workflow).exclude(pk=request.user.pk)) if may_review and free else [],
    }
