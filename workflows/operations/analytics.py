"""Decision analytics (docs/guides/analytics.md): how long plans wait for a
decision, how their reviews end, what is still waiting, and the reminders
and escalations sent, over the caller's teams.

Read from the rows `workflows.engine.review_outcomes` writes as each plan
leaves review, through their (team, decided_at) indexes: the cost of an
answer grows with the decisions in its window, never with the plans or
the audit trail. Percentiles are `percentile_cont` (linear interpolation
between the two nearest values): in SQL on PostgreSQL; on SQLite, which has
none, the window's (group, outcome, seconds) rows are read once and
computed here (memory and time linear in the decisions of the window).
"""

from __future__ import annotations

import math
from collections import defaultdict
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from django.db import connection
from django.db.models import Count, Exists, OuterRef, Q
from django.utils import timezone

from workflows import actions, ages, roles
from workflows.errors import DomainError, NotAllowed
from workflows.models import DecisionAction, DecisionRecord, Outcome, ReviewNotice, Step, Team, Workflow
from workflows.states import WorkflowStatus

DEFAULT_SINCE = "30d"
# The open queue's buckets: plans awaiting review for longer than each.
OPEN_AGES = (0, 3600, 4 * 3600, 86400, 7 * 86400)
DECIDED = (Outcome.APPROVED.value, Outcome.REJECTED.value)
OUTCOMES = [choice.value for choice in Outcome]
NOT_SENT = "not sent"


class Invalid(DomainError):
    code = "invalid"


@dataclass(frozen=True)
class Filters:
    since: datetime
    team: Team | None = None
    action: str = ""

    def query(self) -> dict:
        """The filters as the API's and the console's query string takes them."""
        found = {"since": self.since.isoformat()}
        if self.team is not None:
            found["team"] = self.team.name
        if self.action:
            found["action"] = self.action
        return found


def allowed(user) -> bool:
    return roles.may_read(user, "analytics")


def require(user) -> None:
    if not allowed(user):
        raise NotAllowed("Your role does not read the analytics.")


def parse(user, *, since: str | None, team: str | None, action: str | None, now: datetime | None = None) -> Filters:
    """The filters from their text, or `Invalid` naming each bad one: `since`
    an ISO 8601 time (naive: UTC) or an age such as 7d (default 30d), `team`
    one of the caller's teams by name, `action` an installed action or one
    that has decisions."""
    now = now or timezone.now()
    fields = {}
    since_at = None
    text = (since or "").strip() or DEFAULT_SINCE
    if ages.AGE.match(text):
        try:
            since_at = now - ages.parse_age(text)
        except ages.AgeInvalid as exc:
            fields["since"] = exc.message
    else:
        try:
            since_at = datetime.fromisoformat(text)
        except ValueError:
            fields["since"] = "An ISO 8601 time (2026-01-31T09:00:00Z) or an age such as 30m, 12h or 7d."
        else:
            since_at = since_at if since_at.tzinfo else since_at.replace(tzinfo=UTC)
            try:
                since_at = since_at.astimezone(UTC)
            except OverflowError:  # year 1 east of UTC: before the first representable time
                since_at = None
                fields["since"] = "A time after the year 1."
            if since_at is not None and since_at > now:
                fields["since"] = "A time in the past."
    chosen = None
    if team:
        chosen = Team.objects.visible_to(user).filter(name=team[:64]).first()
        if chosen is None:
            fields["team"] = "Not one of your teams."
    action = (action or "").strip()
    if action and actions.find(action) is None and not DecisionAction.objects.filter(action=action[:100]).exists():
        fields["action"] = "No such action."
    if fields:
        raise Invalid("The analytics filters are not valid.", fields=fields)
    return Filters(since=since_at, team=chosen, action=action)


def percentile(ordered: list[float], fraction: float) -> float | None:
    """`percentile_cont` over values sorted ascending."""
    if not ordered:
        return None
    position = fraction * (len(ordered) - 1)
    low = math.floor(position)
    high = min(low + 1, len(ordered) - 1)
    return ordered[low] + (ordered[high] - ordered[low]) * (position - low)


def _seconds(value) -> float | None:
    return None if value is None else round(float(value), 3)


def _stats(counts: dict, p50, p95, top) -> dict:
    return {
        "decisions": sum(counts.get(outcome, 0) for outcome in DECIDED),
        **{outcome: counts.get(outcome, 0) for outcome in OUTCOMES},
        "auto": counts.get("auto", 0),
        "human": counts.get(Outcome.APPROVED.value, 0) - counts.get("auto", 0),
        "p50": _seconds(p50),
        "p95": _seconds(p95),
        "max": _seconds(top),
    }


def _grouped_sql(rows, fields: list[str | None]) -> dict:
    """{field: {group: stats}} in one pass over the window (PostgreSQL): the
    grouping sets share the read of the rows, and each group's two
    percentiles one sort (`percentile_cont` of an array of fractions)."""
    names = [field for field in fields if field is not None]
    columns = [*names, *(["reviewer_key"] if "reviewer_key" not in names else []), "outcome", "seconds", "actor"]
    inner, params = rows.order_by().values(*columns).query.sql_with_params()
    decided = "outcome IN ({})".format(", ".join(["%s"] * len(DECIDED)))
    # Time to decision is a person's: an approval by policy takes none.
    person = "reviewer_key <> ''"
    counts = ", ".join(f"count(*) FILTER (WHERE outcome = %s) AS {outcome}" for outcome in OUTCOMES)
    counts += ", count(*) FILTER (WHERE outcome = %s AND reviewer_key = '') AS auto"
    grouping = f"GROUPING({', '.join(names)})" if names else "0"
    sets = ", ".join("()" if field is None else f"({field})" for field in fields)
    sql = (
        f"SELECT {grouping}, {', '.join([*names, ''])}{counts}, "
        f"percentile_cont(ARRAY[0.5, 0.95]) WITHIN GROUP (ORDER BY seconds) FILTER (WHERE {decided} AND {person}), "
        f"max(seconds) FILTER (WHERE {decided} AND {person}), max(actor) "
        f"FROM ({inner}) AS window_rows GROUP BY GROUPING SETS ({sets})"
    )
    args = [*OUTCOMES, Outcome.APPROVED.value, *DECIDED, *DECIDED, *params]
    # GROUPING() sets a bit for each column a row is not grouped by, the first column's highest.
    every = (1 << len(names)) - 1
    masks = {every: None} | {every & ~(1 << (len(names) - 1 - n)): name for n, name in enumerate(names)}
    found = {field: {} for field in fields}
    with connection.cursor() as cursor:
        cursor.execute(sql, args)
        for mask, *row in cursor.fetchall():
            keys, (*tallies, fractions, top, actor) = row[: len(names)], row[len(names) :]
            field = masks[mask]
            key = None if field is None else keys[names.index(field)]
            p50, p95 = fractions if fractions is not None else (None, None)
            stats = _stats(dict(zip([*OUTCOMES, "auto"], tallies)), p50, p95, top)
            found[field][key] = stats | {"name": actor or ""}
    if None in found and not found[None]:
        found[None][None] = _stats({}, None, None, None) | {"name": ""}
    return found


def _grouped_python(rows, fields: list[str | None]) -> dict:
    """{field: {group: stats}} from one read of the window's rows (SQLite)."""
    names = [field for field in fields if field is not None]
    counts = {field: defaultdict(lambda: defaultdict(int)) for field in fields}
    times = {field: defaultdict(list) for field in fields}
    actor = {field: {} for field in fields}
    read = [*names, *(["reviewer_key"] if "reviewer_key" not in names else [])]
    for *keys, outcome, seconds, who in (
        rows.order_by().values_list(*read, "outcome", "seconds", "actor").iterator(chunk_size=5000)
    ):
        by_field = dict(zip(read, keys))
        auto = outcome == Outcome.APPROVED and not by_field["reviewer_key"]
        for field in fields:
            key = by_field.get(field)
            counts[field][key][outcome] += 1
            counts[field][key]["auto"] += auto
            if outcome in DECIDED and by_field["reviewer_key"]:
                times[field][key].append(seconds)
            actor[field][key] = max(actor[field].get(key, ""), who)
    found = {}
    for field in fields:
        groups = {}
        for key, each in counts[field].items():
            ordered = sorted(times[field][key])
            groups[key] = _stats(
                each, percentile(ordered, 0.5), percentile(ordered, 0.95), ordered[-1] if ordered else None
            ) | {"name": actor[field][key]}
        if field is None and not groups:
            groups[None] = _stats({}, None, None, None) | {"name": ""}
        found[field] = groups
    return found


def _grouped(rows, fields: list[str | None]) -> dict:
    if connection.vendor == "postgresql":
        return _grouped_sql(rows, fields)
    return _grouped_python(rows, fields)


def _window(model, user, filters: Filters):
    rows = model.objects.visible_to(user).filter(decided_at__gte=filters.since)
    if filters.team is not None:
        rows = rows.filter(team_id=filters.team.pk)
    if filters.action and model is DecisionAction:
        rows = rows.filter(action=filters.action)
    return rows


def _open_plans(user, filters: Filters):
    plans = Workflow.objects.visible_to(user).filter(status=WorkflowStatus.PLANNED)
    if filters.team is not None:
        plans = plans.filter(team_id=filters.team.pk)
    if filters.action:
        plans = plans.filter(Exists(Step.objects.filter(workflow=OuterRef("pk"), lane=0, action=filters.action)))
    return plans


def open_by_age(user, filters: Filters, now: datetime) -> list[dict]:
    """How many plans await review now, and for longer than each age (the
    queue as it stands: `since` does not apply)."""
    counts = _open_plans(user, filters).aggregate(
        **{f"older_{age}": Count("id", filter=Q(created_at__lte=now - timedelta(seconds=age))) for age in OPEN_AGES}
    )
    return [{"older_than_seconds": age, "count": counts[f"older_{age}"]} for age in OPEN_AGES]


def notices_sent(user, filters: Filters) -> dict:
    """Reminders and escalations sent since `since` about the plans in view
    (a notice that told nobody, its plan decided already, does not count)."""
    sent = ReviewNotice.objects.filter(sent_at__gte=filters.since).exclude(outcome__startswith=NOT_SENT)
    sent = sent.filter(workflow__in=_open_or_any(user, filters))
    counts = dict(sent.order_by().values("kind").annotate(n=Count("id")).values_list("kind", "n"))
    return {
        "reminders_sent": counts.get(ReviewNotice.Kind.REMINDER, 0),
        "escalations_sent": counts.get(ReviewNotice.Kind.ESCALATION, 0),
    }


def _open_or_any(user, filters: Filters):
    plans = Workflow.objects.visible_to(user)
    if filters.team is not None:
        plans = plans.filter(team_id=filters.team.pk)
    if filters.action:
        plans = plans.filter(Exists(Step.objects.filter(workflow=OuterRef("pk"), lane=0, action=filters.action)))
    return plans.values("pk")


def decisions(user, filters: Filters, now: datetime | None = None) -> dict:
    """The whole answer of `GET /api/v1/analytics/decisions` for `user`'s teams."""
    require(user)
    now = now or timezone.now()
    # Filtered by action, a plan counts once per action it names: the rows of that action alone.
    rows = _window(DecisionAction if filters.action else DecisionRecord, user, filters)
    by = _grouped(rows, [None, "team_id", "reviewer_key"])
    by_action = _grouped(_window(DecisionAction, user, filters), ["action"])["action"]
    total = by[None][None]
    team_names = dict(Team.objects.filter(pk__in=[k for k in by["team_id"]]).values_list("pk", "name"))
    time_keys = ("p50", "p95", "max")
    group_keys = ("decisions", *OUTCOMES, "auto", "human", *time_keys)
    return {
        "since": filters.since.isoformat(),
        "until": now.isoformat(),
        "decisions": total["decisions"],
        "time_to_decision_seconds": {key: total[key] for key in time_keys},
        "outcomes": {
            **{outcome: total[outcome] for outcome in OUTCOMES},
            # Approvals no person made (a policy's, docs/explanation/policies.md#approval-by-policy), and a person's.
            "auto": total["auto"],
            "human": total["human"],
        },
        "open_by_age": open_by_age(user, filters, now),
        **notices_sent(user, filters),
        "by_team": sorted(
            ({"team": team_names[key], **{k: stats[k] for k in group_keys}} for key, stats in by["team_id"].items()),
            key=lambda item: item["team"],
        ),
        "by_action": sorted(
            ({"action": key, **{k: stats[k] for k in group_keys}} for key, stats in by_action.items()),
            key=lambda item: item["action"],
        ),
        "by_reviewer": sorted(
            (
                {
                    "reviewer": key,
                    "name": stats["name"],
                    **{k: stats[k] for k in ("decisions", *DECIDED, *time_keys)},
                }
                for key, stats in by["reviewer_key"].items()
                if key
            ),
            key=lambda item: (-item["decisions"], item["name"]),
        ),
    }


CSV_COLUMNS = ("group", "key", "name", "decisions", *OUTCOMES, "p50_seconds", "p95_seconds", "max_seconds")


def csv_rows(answer: dict) -> list[list]:
    """One row per group of the answer: the whole window (`all`), then each
    team, action and reviewer, with the same numbers as the JSON."""

    def row(group, key, name, item):
        return [
            group,
            key,
            name,
            item["decisions"],
            *(item.get(outcome, "") for outcome in OUTCOMES),
            item["p50"],
            item["p95"],
            item["max"],
        ]

    total = {**answer["outcomes"], **answer["time_to_decision_seconds"], "decisions": answer["decisions"]}
    rows = [row("all", "", "", total)]
    rows += [row("team", item["team"], item["team"], item) for item in answer["by_team"]]
    rows += [row("action", item["action"], item["action"], item) for item in answer["by_action"]]
    rows += [row("reviewer", item["reviewer"], item["name"], item) for item in answer["by_reviewer"]]
    return rows
