"""The console's bulk jobs: reconcile dead letters before replaying them.

From the dead-letter list an operator reconciles the ticked entries, or all
that match the filter; the job's page shows the three groups (applied, safe,
in doubt) with counts and samples as workers sort them, and offers to
replay the safe group (or every entry). Progress is read from the database,
so a reload shows where the job stands; a running job can be paused and
resumed. The work itself is `workflows.operations.bulk`.
"""

from uuid import UUID

from django.contrib import messages
from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.http import Http404, HttpRequest, HttpResponse
from django.shortcuts import redirect, render
from django.urls import reverse
from django.views.decorators.http import require_GET, require_POST
from django.views.decorators.vary import vary_on_headers

from workflows import roles
from workflows.errors import DomainError, NotVisible
from workflows.models import Job, JobItem
from workflows.operations import bulk, deadletters
from workflows.web.auth import needs_recent_sign_in
from workflows.web.pages import act, list_page, reads
from workflows.web.views.dead_letters import PAGE_SIZE, DeadLetterFilter, list_url, posted_ids


def _get_job_for_user(request: HttpRequest, job_id: UUID, *, act_on: bool = False) -> Job:
    """403 for a role that reads no jobs, 404 for a job the user does not see;
    then 403 to act on it unless an operator."""
    reads(request, "jobs")
    try:
        job = bulk.get_for_user(request.user, job_id)
    except NotVisible:
        raise Http404("No such job.") from None
    if act_on and not roles.is_operator(request.user):
        raise PermissionDenied("Only operators run bulk jobs.")
    return job


def _job_url(job: Job) -> str:
    return reverse("job_detail", kwargs={"job_id": job.pk})


@login_required
@require_POST
@needs_recent_sign_in(back="dead_letter_list")
def dead_letter_reconcile(request: HttpRequest) -> HttpResponse:
    """Reconcile the ticked entries, or all matching the list's filter."""
    if not roles.is_operator(request.user):
        raise PermissionDenied("Only operators can reconcile dead letters.")
    filters = DeadLetterFilter(request.POST, request.user)
    back = list_url(filters)
    if filters.errors:
        # Dropping a bad field would widen the selection; refuse instead.
        messages.error(request, "The filter is not valid; choose it again.")
        return redirect(back)
    if request.POST.get("scope") == "filter":
        chosen = filters.selection()
        shown = {name: filters.value(name) for name in ("action", "failure_class") if filters.value(name)}
        if filters.value("age"):
            shown["older_than"] = filters.value("age")
    else:
        ids = posted_ids(request)
        chosen, shown = {"ids": ids}, {"ids": [str(pk) for pk in ids]}
    try:
        if not deadletters.matching(request.user, **chosen).exists():
            messages.error(request, "No open dead letters match this selection.")
            return redirect(back)
        job, beyond = bulk.reconcile(
            request.user, chosen, shown_filter=shown, dry_run=request.POST.get("dry_run") == "1"
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(back)
    if beyond:
        messages.warning(request, f"Only the oldest {bulk.MAX_ITEMS} matching entries were chosen.")
    return redirect(_job_url(job))


def _context(request: HttpRequest, job: Job) -> dict:
    counts = bulk.counts(job)
    return {
        "job": job,
        "counts": counts,
        "samples": bulk.samples(job),
        "live": job.status == Job.Status.RUNNING,
        "can_act": roles.is_operator(request.user),
        "can_replay": (
            roles.is_operator(request.user)
            and job.kind == Job.Kind.RECONCILE
            and job.status == Job.Status.DONE
            and (counts["safe"] or counts["in_doubt"])
        ),
    }


@login_required
@require_GET
def job_detail(request: HttpRequest, job_id: UUID) -> HttpResponse:
    job = _get_job_for_user(request, job_id)
    template = "workflows/job_detail.html#live" if request.htmx else "workflows/job_detail.html"
    return render(request, template, _context(request, job))


def _act(request: HttpRequest, job_id: UUID, operation, done: str) -> HttpResponse:
    job = _get_job_for_user(request, job_id, act_on=True)

    def live() -> HttpResponse:
        return render(request, "workflows/job_detail.html#live", _context(request, _get_job_for_user(request, job_id)))

    return act(request, lambda: operation(job, by=request.user), done=done, back=_job_url(job), partial=live)


@login_required
@require_POST
@needs_recent_sign_in(back="job_detail")
def job_pause(request: HttpRequest, job_id: UUID) -> HttpResponse:
    return _act(request, job_id, bulk.pause, "Paused")


@login_required
@require_POST
@needs_recent_sign_in(back="job_detail")
def job_resume(request: HttpRequest, job_id: UUID) -> HttpResponse:
    return _act(request, job_id, bulk.resume, "Resumed")


@login_required
@require_POST
@needs_recent_sign_in(back="job_detail")
def job_replay(request: HttpRequest, job_id: UUID) -> HttpResponse:
    """Replay the entries a reconciliation chose that are still open: the
    safe group (each sorted again just before its replay), or all of them."""
    job = _get_job_for_user(request, job_id, act_on=True)
    only = request.POST.get("only", Job.Only.SAFE)
    try:
        replay, _ = bulk.replay(
            request.user,
            {"job": job.pk},
            shown_filter={"job": str(job.pk)},
            only=only,
            reason=request.POST.get("reason", ""),
        )
    except DomainError as exc:
        messages.error(request, exc.message)
        return redirect(_job_url(job))
    messages.success(request, f"Replaying {replay.items.count()} dead letters ({only}).")
    return redirect(_job_url(replay))


@login_required
@require_GET
@vary_on_headers("HX-Request")
def job_list(request: HttpRequest) -> HttpResponse:
    """The bulk jobs the user may see, newest first, with their progress."""
    reads(request, "jobs")
    jobs = (
        Job.objects.visible_to(request.user)
        .select_related("created_by")
        .annotate(total=Count("items"), remaining=Count("items", filter=Q(items__state=JobItem.State.PENDING)))
    )
    return list_page(request, jobs, "workflows/job_list.html", rows="jobs", page_size=PAGE_SIZE, context={})
