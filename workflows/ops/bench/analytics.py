"""(l) Analytics at scale: `--analytics-decisions` (default 100,000)
plans' review endings bulk-inserted into the analytics tables
(`DecisionRecord`, `DecisionAction`: what `review_outcomes` writes as each
plan leaves review, without the plans themselves, which the answer never
reads) with a spread like a real console's: four teams (50/25/15/10 %),
twelve actions (one plan in three names two), forty reviewers, decided over
the last 90 days, mostly approved, times to decision log-normal around
twenty minutes. Then `GET /api/v1/analytics/decisions` is timed over HTTP
against one web process started as production starts it, with a token of
the largest team, as a ratio to a trivial authenticated GET
(`/api/v1/workflows?limit=1`) timed in the same run, the same way; and
the answer over every team (a global auditor's, 100% of the rows), timed
in-process. The seeding counts the rows already there: a second run on the
same database adds only the shortfall.
"""

from __future__ import annotations

import random
import time
import uuid
from datetime import timedelta

import requests
from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction
from django.utils import timezone

from workflows import roles
from workflows.models import DecisionAction, DecisionRecord, Team
from workflows.operations import analytics, tokens
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import spread
from workflows.ops.processes import WebServer

TEAMS = (("bench-a", 0.50), ("bench-b", 0.25), ("bench-c", 0.15), ("bench-d", 0.10))
ACTIONS = tuple(f"bench.action-{n:02d}" for n in range(12))
REVIEWERS = 40
OUTCOMES = (("approved", 0.80), ("rejected", 0.12), ("expired", 0.05), ("cancelled", 0.03))
DAYS = 90
BATCH = 5_000
REQUESTS = 30
SERVER_NAME = "bench:analytics"


def _analyst():
    """An auditor of every bench team (not global), and one global auditor."""
    users = get_user_model()
    analyst, _ = users.objects.get_or_create(username="bench-analyst")
    analyst.groups.add(Group.objects.get_or_create(name=roles.AUDITORS)[0])
    everyone, _ = users.objects.get_or_create(username="bench-global-auditor")
    everyone.groups.add(*(Group.objects.get_or_create(name=name)[0] for name in (roles.AUDITORS, roles.GLOBAL)))
    teams = [Team.objects.get_or_create(name=name)[0] for name, _ in TEAMS]
    for team in teams:
        team.members.add(analyst)
    return analyst, everyone, teams


def seed(count: int, teams: list[Team], rng: random.Random) -> int:
    """Bulk-insert the shortfall of `count` endings in the bench's teams."""
    have = DecisionRecord.objects.filter(team__in=teams).count()
    now = timezone.now()
    weights = [share for _, share in TEAMS]
    outcome_weights = [share for _, share in OUTCOMES]
    added = 0
    while have + added < count:
        size = min(BATCH, count - have - added)
        records, plans = [], []
        for _ in range(size):
            team = rng.choices(teams, weights)[0]
            outcome = rng.choices([name for name, _ in OUTCOMES], outcome_weights)[0]
            # An hour short of the window: every ending is inside "since 90d" when it is asked.
            decided_at = now - timedelta(seconds=rng.uniform(0, DAYS * 86400 - 3600))
            seconds = min(rng.lognormvariate(7.1, 1.3), 7 * 86400)  # median ~20 min, a long tail
            reviewer = f"user:bench-{rng.randrange(REVIEWERS)}" if outcome in ("approved", "rejected") else ""
            records.append(
                DecisionRecord(
                    workflow_id=uuid.uuid4(),
                    team=team,
                    outcome=outcome,
                    reviewer_key=reviewer,
                    actor=reviewer.removeprefix("user:") or "system",
                    entered_review_at=decided_at - timedelta(seconds=seconds),
                    decided_at=decided_at,
                    seconds=seconds,
                )
            )
            plans.append(rng.sample(ACTIONS, 2 if rng.random() < 1 / 3 else 1))
        with transaction.atomic():
            DecisionRecord.objects.bulk_create(records)
            if any(record.pk is None for record in records):  # a database that returns no keys from a bulk insert
                ids = dict(
                    DecisionRecord.objects.filter(workflow_id__in=[r.workflow_id for r in records]).values_list(
                        "workflow_id", "pk"
                    )
                )
                for record in records:
                    record.pk = ids[record.workflow_id]
            DecisionAction.objects.bulk_create(
                DecisionAction(
                    record_id=record.pk,
                    action=action,
                    team=record.team,
                    outcome=record.outcome,
                    reviewer_key=record.reviewer_key,
                    actor=record.actor,
                    decided_at=record.decided_at,
                    seconds=record.seconds,
                )
                for record, names in zip(records, plans)
                for action in names
            )
        added += size
    return added


def _timed(session: requests.Session, url: str, params: dict, count: int) -> dict:
    times = []
    for _ in range(count):
        began = time.perf_counter()
        response = session.get(url, params=params, timeout=60)
        times.append((time.perf_counter() - began) * 1000)
        if response.status_code != 200:
            raise BenchError(f"GET {url} {params} answered {response.status_code}: {response.text[:200]}")
    return spread(times, 1)


class AnalyticsPart:
    """Part (l), run by the Bench with its options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o

    def run(self) -> dict:
        analyst, everyone, teams = _analyst()
        began = time.monotonic()
        added = seed(self.o.analytics_decisions, teams, random.Random(20261205))
        seed_s = time.monotonic() - began
        total = DecisionRecord.objects.filter(team__in=teams).count()
        largest = DecisionRecord.objects.filter(team=teams[0]).count()
        self.bench.log(f"    {total:,} decisions ({added:,} seeded in {seed_s:.1f} s), {largest:,} in {teams[0].name}")
        token = tokens.issue(analyst, name="bench analytics", team=teams[0])
        env = {**self.bench.cluster_env, "ALLOWED_HOSTS": "127.0.0.1", "SECURE_SSL_REDIRECT": "0"}
        queries = {
            "default (30d)": {},
            "since 90d": {"since": f"{DAYS}d"},
            "since 90d, one action": {"since": f"{DAYS}d", "action": ACTIONS[0]},
        }
        with WebServer(SERVER_NAME, self.bench.workdir, env) as server:
            session = requests.Session()
            session.headers["Authorization"] = f"Bearer {token}"
            api = f"{server.url}/api/v1"
            for _ in range(3):  # warm: the process's first requests load code and caches
                session.get(f"{api}/workflows", params={"limit": 1}, timeout=60)
                session.get(f"{api}/analytics/decisions", timeout=60)
            baseline = _timed(session, f"{api}/workflows", {"limit": 1}, REQUESTS)
            timed = {
                label: _timed(session, f"{api}/analytics/decisions", params, REQUESTS)
                for label, params in queries.items()
            }
        everyone = get_user_model().objects.get(pk=everyone.pk)
        in_process = []
        for _ in range(5):
            began = time.perf_counter()
            answer = analytics.decisions(everyone, analytics.parse(everyone, since=f"{DAYS}d", team=None, action=None))
            in_process.append((time.perf_counter() - began) * 1000)
        result = {
            "decisions": total,
            "seeded": added,
            "seed_seconds": round(seed_s, 1),
            "largest_team_decisions": largest,
            "baseline_ms": baseline,
            "answers_ms": timed,
            "ratio_p50_to_baseline": {label: round(s["p50"] / baseline["p50"], 1) for label, s in timed.items()},
            "all_teams_in_process_ms": spread(in_process, 1),
            "all_teams_decisions_counted": answer["decisions"]
            + sum(answer["outcomes"][name] for name in ("expired", "cancelled")),
        }
        for label, s in timed.items():
            self.bench.log(
                f"    {label}: p50 {s['p50']} ms, p95 {s['p95']} ms "
                f"({result['ratio_p50_to_baseline'][label]} x the trivial GET's p50 {baseline['p50']} ms)"
            )
        return result
