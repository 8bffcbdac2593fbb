"""Operators' view of what needs attention, and the dashboard's small charts.

Counts are capped (`COUNT_CAP`) and read through indexes on status, so the
pages stay fast however large the tables grow; charts are server-rendered
SVG from bounded time windows.
"""

from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, Q
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from workflows import roles
from workflows.actions import registry
from workflows.models import ActionPolicy, ActionThrottle, Attempt, Compensation, DeadLetter, Step, Workflow
from workflows.states import AttemptStatus, CompensationStatus, FailureClass, StepStatus

COUNT_CAP = 1000
LIST_SIZE = 20


def capped(queryset) -> str:
    """How many, up to COUNT_CAP, without counting the whole table."""
    n = len(queryset.values_list("pk", flat=True)[:COUNT_CAP])
    return f"{COUNT_CAP - 1}+" if n >= COUNT_CAP else str(n)


def _require(request: HttpRequest, *allowed: str) -> None:
    if not any(roles.has_role(request.user, role) for role in allowed):
        raise PermissionDenied


def _steps_of(user):
    """The steps of the workflows `user` sees."""
    return Step.objects.filter(workflow__in=Workflow.objects.visible_to(user))


def _section(anchor: str, title: str, rows, kind: str) -> dict:
    """One list of the attention page: how many (capped) and the first LIST_SIZE rows."""
    return {"id": anchor, "title": title, "count": capped(rows), "rows": rows[:LIST_SIZE], "kind": kind}


def attention_context(user) -> dict:
    """What needs an operator, in `user`'s teams."""
    dead = DeadLetter.objects.visible_to(user).open().select_related("workflow").order_by("-created_at")
    in_doubt = (
        _steps_of(user)
        .filter(status=StepStatus.IN_DOUBT)
        .select_related("workflow", "proposed_by")
        .order_by("-updated_at")
    )
    blocked = _steps_of(user).filter(status=StepStatus.BLOCKED).select_related("workflow").order_by("-updated_at")
    comps = Compensation.objects.visible_to(user)
    awaiting = (
        comps.filter(status=CompensationStatus.REQUESTED)
        .select_related("workflow", "requested_by")
        .order_by("-created_at")
    )
    failed = comps.filter(status=CompensationStatus.FAILED).select_related("workflow").order_by("-updated_at")
    return {
        "sections": [
            _section("dead-letters", "Dead letters", dead, "dead_letter"),
            _section("in-doubt", "In-doubt steps", in_doubt, "step"),
            _section("blocked", "Blocked steps (need a fresh approval)", blocked, "step"),
            _section("compensations", "Compensations awaiting authorization", awaiting, "compensation"),
            _section("compensations-failed", "Compensations that failed", failed, "compensation"),
        ],
        # This process's own (each process logs its own at start-up).
        "plugin_problems": registry.problems(),
        "now": timezone.now(),
    }


@login_required
@require_GET
def attention(request: HttpRequest) -> HttpResponse:
    _require(request, roles.OPERATORS)
    template = "workflows/attention.html#board" if request.htmx else "workflows/attention.html"
    return render(request, template, attention_context(request.user))


def _bars(points: list[tuple[str, int]], width=600, height=120) -> dict:
    """Geometry of a small bar chart: one bar per point, scaled to the maximum."""
    top = max([v for _, v in points] + [1])
    slot = width / max(len(points), 1)
    bars = []
    for index, (label, value) in enumerate(points):
        h = round(height * value / top, 1)
        bars.append(
            {
                "x": round(index * slot + 1, 1),
                "y": round(height - h, 1),
                "w": max(round(slot - 2, 1), 1),
                "h": h,
                "label": label,
                "value": value,
            }
        )
    return {"bars": bars, "width": width, "height": height, "max": top}


def dashboard_context(user, now=None) -> dict:
    """The charts over `user`'s teams' work; the in-flight table is the
    cluster's, because the limits it shows are shared by every team."""
    now = now or timezone.now()
    since = now - timedelta(minutes=60)
    attempts = Attempt.objects.filter(step__workflow__in=Workflow.objects.visible_to(user))
    per_minute = dict(
        attempts.filter(finished_at__gte=since, status__in=[AttemptStatus.SUCCEEDED, AttemptStatus.RECONCILED])
        .annotate(minute=TruncMinute("finished_at"))
        .values("minute")
        .annotate(n=Count("id"))
        .values_list("minute", "n")
    )
    minutes = [(now - timedelta(minutes=m)).replace(second=0, microsecond=0) for m in range(59, -1, -1)]
    steps = [(m.strftime("%H:%M"), per_minute.get(m, 0)) for m in minutes]
    failures = dict(
        attempts.filter(started_at__gte=now - timedelta(hours=24))
        .exclude(failure_class="")
        .values("failure_class")
        .annotate(n=Count("id"))
        .values_list("failure_class", "n")
    )
    by_class = [(c, failures.get(c, 0)) for c in FailureClass.values]
    buckets = [
        ("< 5 min", timedelta(minutes=5)),
        ("< 1 h", timedelta(hours=1)),
        ("< 1 day", timedelta(days=1)),
        ("< 1 week", timedelta(days=7)),
        ("older", None),
    ]
    ages, lower = [], timedelta(0)
    for label, upper in buckets:
        entries = DeadLetter.objects.visible_to(user).open().filter(created_at__lte=now - lower)
        if upper is not None:
            entries = entries.filter(created_at__gt=now - upper)
        ages.append((label, int(capped(entries).rstrip("+"))))
        lower = upper or lower
    return {
        "steps_chart": _bars(steps),
        "steps_total": sum(v for _, v in steps),
        "failures_chart": _bars(by_class),
        "ages_chart": _bars(ages),
        "now": now,
        "in_flight": in_flight_rows(now),
    }


def effects_in_flight() -> dict[str, int]:
    """Steps RUNNING per action (a claimed step is one effect in flight or about to be)."""
    return dict(
        Step.objects.filter(status=StepStatus.RUNNING)
        .values("action")
        .annotate(n=Count("id"))
        .values_list("action", "n")
    )


def in_flight_rows(now) -> list[dict]:
    """Per action with effects in flight, a limit or a pause: how many are in
    flight now, beside its limits (docs/explanation/concurrency.md#effects-in-flight)."""
    in_flight = effects_in_flight()
    limited = {
        p.action: p
        for p in ActionPolicy.objects.filter(Q(max_in_flight__isnull=False) | Q(rate_per_second__isnull=False))
    }
    paused = dict(ActionThrottle.objects.filter(paused_until__gt=now).values_list("action", "paused_until"))
    return [
        {
            "action": name,
            "in_flight": in_flight.get(name, 0),
            "max_in_flight": getattr(limited.get(name), "max_in_flight", None),
            "rate_per_second": getattr(limited.get(name), "rate_per_second", None),
            "paused_until": paused.get(name),
        }
        for name in sorted(set(in_flight) | set(limited) | set(paused))
    ]


@login_required
@require_GET
def dashboard(request: HttpRequest) -> HttpResponse:
    _require(request, roles.OPERATORS, roles.AUDITORS, roles.REVIEWERS)
    template = "workflows/dashboard.html#charts" if request.htmx else "workflows/dashboard.html"
    readers = roles.is_operator(request.user) or roles.is_auditor(request.user)
    return render(request, template, {**dashboard_context(request.user), "policies_readable": readers})
