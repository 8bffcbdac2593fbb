"""The analytics page and its CSV (docs/guides/analytics.md): the numbers of
`GET /api/v1/analytics/decisions`, for the same filters, as bars drawn in
HTML (a `meter` per row: no script, no chart library, readable at any
width) beside tables of the same numbers."""

import csv
import io
from urllib.parse import urlencode

from django.contrib.auth.decorators import login_required
from django.http import HttpRequest, HttpResponse
from django.shortcuts import render
from django.views.decorators.http import require_GET

from workflows import actions
from workflows.models import Team
from workflows.operations import analytics
from workflows.web.pages import reads
from workflows.web.views.audit import FORMULA_START

OPEN_LABELS = {0: "all open", 3600: "over 1 h", 14400: "over 4 h", 86400: "over 1 day", 604800: "over 1 week"}


def duration(seconds: float | None) -> str:
    """20 s, 4 min 32 s, 2 h 5 min, 3 d 4 h: two units at most."""
    if seconds is None:
        return "—"
    if seconds < 60:
        return f"{seconds:.3g} s" if seconds < 10 else f"{round(seconds)} s"
    whole = round(seconds)
    days, rest = divmod(whole, 86400)
    hours, rest = divmod(rest, 3600)
    minutes, secs = divmod(rest, 60)
    units = [(days, "d"), (hours, "h"), (minutes, "min"), (secs, "s")]
    first = next(n for n, (value, _) in enumerate(units) if value)
    return " ".join(f"{value} {unit}" for value, unit in units[first : first + 2] if value)


def _chart(rows: list[tuple[str, float | int | None]], *, times: bool) -> dict:
    top = max([value or 0 for _, value in rows] + [1])
    return {
        "max": top,
        "bars": [
            {"label": label, "value": value or 0, "text": duration(value) if times else value} for label, value in rows
        ],
    }


def _filters(request: HttpRequest):
    """The filters and the form's values, or the errors of a bad one."""
    values = {name: request.GET.get(name, "") for name in ("since", "team", "action")}
    try:
        return analytics.parse(request.user, **values), values, {}
    except analytics.Invalid as exc:
        return None, values, exc.fields


@login_required
@require_GET
def analytics_page(request: HttpRequest) -> HttpResponse:
    reads(request, "analytics")
    filters, values, errors = _filters(request)
    context = {
        "values": {**values, "since": values["since"] or analytics.DEFAULT_SINCE},
        "errors": errors,
        "teams": list(Team.objects.visible_to(request.user).order_by("name").values_list("name", flat=True)),
        "actions": sorted(set(actions.names()) | ({values["action"]} - {""})),
    }
    if filters is None:
        return render(request, "workflows/analytics.html", context, status=400)
    answer = analytics.decisions(request.user, filters)
    times = answer["time_to_decision_seconds"]
    context.update(
        answer=answer,
        times={key: duration(value) for key, value in times.items()},
        query=urlencode(values),
        outcomes_chart=_chart([(key, value) for key, value in answer["outcomes"].items()], times=False),
        open_chart=_chart(
            [(OPEN_LABELS.get(row["older_than_seconds"], ""), row["count"]) for row in answer["open_by_age"]],
            times=False,
        ),
        team_chart=_chart([(row["team"], row["p50"]) for row in answer["by_team"]], times=True),
        action_chart=_chart([(row["action"], row["p50"]) for row in answer["by_action"]], times=True),
        reviewer_chart=_chart([(row["name"], row["p50"]) for row in answer["by_reviewer"]], times=True),
        groups=[
            ("team", "Team", answer["by_team"]),
            ("action", "Action", answer["by_action"]),
        ],
    )
    for row in answer["by_team"] + answer["by_action"] + answer["by_reviewer"]:
        row["times"] = {key: duration(row[key]) for key in ("p50", "p95", "max")}
    return render(request, "workflows/analytics.html", context)


def _cell(value) -> str:
    """A spreadsheet runs a cell that starts with = + - @ as a formula: such
    a cell (a team, action or account name) is prefixed with an apostrophe."""
    text = "" if value is None else str(value)
    return "'" + text if text.startswith(FORMULA_START) else text


@login_required
@require_GET
def analytics_csv(request: HttpRequest) -> HttpResponse:
    """One row per group (the whole window, each team, action and reviewer):
    the numbers of the page and the API for the same filters."""
    reads(request, "analytics")
    filters, _, errors = _filters(request)
    if filters is None:
        problems = "; ".join(f"{name}: {message}" for name, message in errors.items())
        return HttpResponse(
            f"The filters are not valid: {problems}", status=400, content_type="text/plain; charset=utf-8"
        )
    out = io.StringIO()
    writer = csv.writer(out)
    writer.writerow(analytics.CSV_COLUMNS)
    for row in analytics.csv_rows(analytics.decisions(request.user, filters)):
        writer.writerow([_cell(value) for value in row])
    response = HttpResponse(out.getvalue(), content_type="text/csv; charset=utf-8")
    response["Content-Disposition"] = 'attachment; filename="decision-analytics.csv"'
    return response
