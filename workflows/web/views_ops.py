"""Operators' view of what needs attention, and the dashboard's small charts.

Counts are capped (`COUNT_CAP`) and read through indexes on status, so the
pages stay fast however large the tables grow; charts are server-rendered
SVG from bounded time windows.
"""

import hmac
import ipaddress
from datetime import timedelta

from django.contrib.auth.decorators import login_required
from django.core.exceptions import PermissionDenied
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.db.models.functions import TruncMinute
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.utils import timezone
from django.views.decorators.http import require_GET

from workflows import roles
from workflows.actions import registry
from workflows.models import ActionPolicy, ActionThrottle, Attempt, Compensation, DeadLetter, Step, Workflow
from workflows.states import AttemptStatus, CompensationStatus, FailureClass, StepStatus
from workflows.web import waiting

COUNT_CAP = 1000
LIST_SIZE = 20


def _capped(queryset) -> str:
    """How many, up to COUNT_CAP, without counting the whole table."""
    n = len(queryset.values_list("pk", flat=True)[:COUNT_CAP])
    return f"{COUNT_CAP - 1}+" if n >= COUNT_CAP else str(n)


def _require(request: HttpRequest, *allowed: str) -> None:
    if not any(roles.has_role(request.user, role) for role in allowed):
        raise PermissionDenied


def _steps_of(user):
    """The steps of the workflows `user` sees."""
    return Step.objects.filter(workflow__in=Workflow.objects.visible_to(user))


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
            {
                "id": "dead-letters",
                "title": "Dead letters",
                "count": _capped(dead),
                "rows": dead[:LIST_SIZE],
                "kind": "dead_letter",
            },
            {
                "id": "in-doubt",
                "title": "In-doubt steps",
                "count": _capped(in_doubt),
                "rows": in_doubt[:LIST_SIZE],
                "kind": "step",
            },
            {
                "id": "blocked",
                "title": "Blocked steps (need a fresh approval)",
                "count": _capped(blocked),
                "rows": blocked[:LIST_SIZE],
                "kind": "step",
            },
            {
                "id": "compensations",
                "title": "Compensations awaiting authorization",
                "count": _capped(awaiting),
                "rows": awaiting[:LIST_SIZE],
                "kind": "compensation",
            },
            {
                "id": "compensations-failed",
                "title": "Compensations that failed",
                "count": _capped(failed),
                "rows": failed[:LIST_SIZE],
                "kind": "compensation",
            },
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
        ages.append((label, int(_capped(entries).rstrip("+"))))
        lower = upper or lower
    return {
        "steps_chart": _bars(steps),
        "steps_total": sum(v for _, v in steps),
        "failures_chart": _bars(by_class),
        "ages_chart": _bars(ages),
        "now": now,
        "in_flight": in_flight_rows(now),
    }


def in_flight_rows(now) -> list[dict]:
    """Per action with effects in flight, a limit or a pause: how many are in
    flight now, beside its limits (DESIGN §19)."""
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


def _team_metrics(lines: list[str]) -> None:
    """Per-team series beside the cluster's totals: the scraper is the
    operators' (METRICS_TOKEN), and each team's dashboards filter on `team`."""
    by_team = (
        Workflow.objects.values_list("team__name", "status").annotate(n=Count("id")).order_by("team__name", "status")
    )
    _metric(
        lines,
        "durable_team_workflows",
        "gauge",
        "Workflows by team and status.",
        [({"team": team, "status": status}, n) for team, status, n in by_team],
    )
    dead = (
        DeadLetter.objects.open()
        .values_list("workflow__team__name")
        .annotate(n=Count("id"))
        .order_by("workflow__team__name")
    )
    _metric(
        lines,
        "durable_team_dead_letters_open",
        "gauge",
        "Open dead letters by team.",
        [({"team": team}, n) for team, n in dead],
    )


def _metric(lines: list[str], name: str, kind: str, help_text: str, samples: list[tuple[dict, float]]) -> None:
    lines.append(f"# HELP {name} {help_text}")
    lines.append(f"# TYPE {name} {kind}")
    for labels, value in samples:
        label_text = ",".join(f'{k}="{v}"' for k, v in labels.items())
        lines.append(f"{name}{{{label_text}}} {value}" if label_text else f"{name} {value}")


# Upper bounds (seconds) of the effect latency histogram, and its window.
EFFECT_BUCKETS = (0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10, 30)
EFFECT_WINDOW = timedelta(hours=1)


def effects_in_flight() -> dict[str, int]:
    """Steps RUNNING per action (a claimed step is one effect in flight or about to be)."""
    return dict(
        Step.objects.filter(status=StepStatus.RUNNING)
        .values("action")
        .annotate(n=Count("id"))
        .values_list("action", "n")
    )


def effect_durations(now=None) -> dict[str, dict]:
    """Per action, the attempts finished in the last EFFECT_WINDOW: cumulative
    counts per bucket bound, the count and the sum of their durations. One
    grouped query over the `attempt_finished` index range."""
    since = (now or timezone.now()) - EFFECT_WINDOW
    duration = ExpressionWrapper(F("finished_at") - F("started_at"), output_field=DurationField())
    buckets = {
        f"le{n}": Count("id", filter=Q(duration__lte=timedelta(seconds=bound)))
        for n, bound in enumerate(EFFECT_BUCKETS)
    }
    rows = (
        Attempt.objects.filter(finished_at__gte=since)
        .annotate(duration=duration)
        .values("step__action")
        .annotate(n=Count("id"), total=Sum("duration"), **buckets)
    )
    return {
        row["step__action"]: {
            "buckets": [row[f"le{n}"] for n in range(len(EFFECT_BUCKETS))],
            "count": row["n"],
            "sum": (row["total"] or timedelta(0)).total_seconds(),
        }
        for row in rows
    }


def _effect_metrics(lines: list[str]) -> None:
    in_flight = effects_in_flight()
    _metric(
        lines,
        "durableconsole_effects_in_flight",
        "gauge",
        "Steps RUNNING (effects in flight), per action.",
        [({"action": a}, in_flight[a]) for a in sorted(in_flight)],
    )
    waits = dict(
        Step.objects.filter(status=StepStatus.WAITING_RETRY, failure_class=FailureClass.RATE_LIMITED)
        .values("action")
        .annotate(n=Count("id"))
        .values_list("action", "n")
    )
    _metric(
        lines,
        "durableconsole_rate_limited_waits",
        "gauge",
        "Steps waiting to retry after a RATE_LIMITED answer, per action.",
        [({"action": a}, waits[a]) for a in sorted(waits)],
    )
    name = "durableconsole_effect_duration_seconds"
    lines.append(f"# HELP {name} Duration of attempts finished in the last hour (started to finished), per action.")
    lines.append(f"# TYPE {name} histogram")
    for action, h in sorted(effect_durations().items()):
        for bound, n in zip(EFFECT_BUCKETS, h["buckets"], strict=True):
            lines.append(f'{name}_bucket{{action="{action}",le="{bound}"}} {n}')
        lines.append(f'{name}_bucket{{action="{action}",le="+Inf"}} {h["count"]}')
        lines.append(f'{name}_sum{{action="{action}"}} {round(h["sum"], 6)}')
        lines.append(f'{name}_count{{action="{action}"}} {h["count"]}')


# Headers a proxy adds when it passes a request on: a request with any of
# them did not come from the loopback caller it appears to come from.
FORWARDING_HEADERS = (
    "Forwarded",
    "X-Forwarded-For",
    "X-Forwarded-Host",
    "X-Forwarded-Proto",
    "X-Real-IP",
    "X-Client-IP",
    "True-Client-IP",
    "CF-Connecting-IP",
    "Via",
)


def _metrics_refusal(request: HttpRequest) -> HttpResponse | None:
    """Who may scrape (DESIGN §27): with METRICS_TOKEN, whoever sends it as
    a bearer token (compared in constant time); without, only a direct
    caller on loopback, never one a proxy forwarded."""
    from django.conf import settings

    if token := settings.METRICS_TOKEN:
        given = request.headers.get("Authorization", "")
        if not hmac.compare_digest(given.encode(), f"Bearer {token}".encode()):
            response = HttpResponse("A valid metrics token is required.\n", status=401, content_type="text/plain")
            response["WWW-Authenticate"] = 'Bearer realm="metrics"'
            return response
        return None
    try:
        peer = ipaddress.ip_address(request.META.get("REMOTE_ADDR", ""))
    except ValueError:
        peer = None
    # A dual-stack server may give 127.0.0.1 as ::ffff:127.0.0.1.
    loopback = peer is not None and (getattr(peer, "ipv4_mapped", None) or peer).is_loopback
    if not loopback or any(name in request.headers for name in FORWARDING_HEADERS):
        return HttpResponse(
            "Metrics answer loopback callers only, or set METRICS_TOKEN.\n", status=403, content_type="text/plain"
        )
    return None


@require_GET
def metrics(request: HttpRequest) -> HttpResponse:
    """Prometheus text, for the callers `_metrics_refusal` lets through."""
    if refusal := _metrics_refusal(request):
        return refusal
    lines: list[str] = []
    by_status = dict(Workflow.objects.values("status").annotate(n=Count("id")).values_list("status", "n"))
    _metric(
        lines,
        "durable_workflows",
        "gauge",
        "Workflows by status.",
        [({"status": s}, by_status.get(s, 0)) for s in sorted(by_status)],
    )
    _team_metrics(lines)
    active = dict(
        Step.objects.exclude(status__in=[StepStatus.COMPLETE, StepStatus.COMPENSATED, StepStatus.PENDING])
        .values("status")
        .annotate(n=Count("id"))
        .values_list("status", "n")
    )
    _metric(
        lines,
        "durable_steps_unsettled",
        "gauge",
        "Steps running, waiting, parked or in doubt, by status.",
        [({"status": s}, active.get(s, 0)) for s in sorted(active)],
    )
    oldest = DeadLetter.objects.open().order_by("created_at").values_list("created_at", flat=True).first()
    _metric(
        lines,
        "durable_dead_letters_open",
        "gauge",
        "Open dead letters (capped at 1000).",
        [({}, int(_capped(DeadLetter.objects.open()).rstrip("+")))],
    )
    _metric(
        lines,
        "durable_dead_letter_oldest_age_seconds",
        "gauge",
        "Age of the oldest open dead letter.",
        [({}, round((timezone.now() - oldest).total_seconds(), 3) if oldest else 0)],
    )
    recent = timezone.now() - timedelta(minutes=5)
    done = Attempt.objects.filter(
        finished_at__gte=recent, status__in=[AttemptStatus.SUCCEEDED, AttemptStatus.RECONCILED]
    ).count()
    _metric(
        lines, "durable_steps_completed_5m", "gauge", "Attempts that succeeded in the last five minutes.", [({}, done)]
    )
    _effect_metrics(lines)
    _metric(
        lines,
        "durable_waiters",
        "gauge",
        "Requests of GET /api/v1/workflows/{id}/wait waiting in this web process (not the cluster).",
        [({}, waiting.watcher.waiting())],
    )
    return HttpResponse("\n".join(lines) + "\n", content_type="text/plain; version=0.0.4")
