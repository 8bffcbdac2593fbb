"""What machines ask: the health check and Prometheus metrics."""

import hmac
import ipaddress
from datetime import timedelta

from django.conf import settings
from django.db import connection
from django.db.models import Count, DurationField, ExpressionWrapper, F, Q, Sum
from django.http import HttpRequest, HttpResponse, JsonResponse
from django.utils import timezone
from django.views.decorators.http import require_GET

from workflows.models import Attempt, DeadLetter, Step, Workflow
from workflows.states import AttemptStatus, FailureClass, StepStatus
from workflows.web import waiting
from workflows.web.views.ops import capped, effects_in_flight


@require_GET
def healthz(request: HttpRequest) -> JsonResponse:
    try:
        with connection.cursor() as cursor:
            cursor.execute("SELECT 1")
    except Exception:
        return JsonResponse({"status": "error", "database": "unreachable"}, status=503)
    return JsonResponse({"status": "ok"})


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
    """Who may scrape (docs/explanation/decisions.md#bound-decisions): with METRICS_TOKEN, whoever sends it as
    a bearer token (compared in constant time); without, only a direct
    caller on loopback, never one a proxy forwarded."""
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
        Step.objects.exclude(
            status__in=[StepStatus.COMPLETE, StepStatus.COMPENSATED, StepStatus.PENDING, StepStatus.SKIPPED]
        )
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
        [({}, int(capped(DeadLetter.objects.open()).rstrip("+")))],
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
