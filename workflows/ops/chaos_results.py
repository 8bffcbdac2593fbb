"""What a chaos soak (`workflows.ops.chaos`) found: each kill and restart,
the checks at the end, and the report `manage.py chaos` prints (or its JSON).
"""

from __future__ import annotations

import statistics
from collections import Counter
from dataclasses import asdict, dataclass, field

# What a kill does (`workflows.ops.chaos`): one of each per seeded round.
KINDS = ("worker", "child", "group", "sessions")


@dataclass
class Kill:
    number: int
    kind: str
    cluster: str
    at: float  # seconds since the soak began
    targets: list[int]  # pids killed, or backend pids terminated
    proven: bool  # the processes are gone, or the backends were terminated
    orphans: dict[int, int] = field(default_factory=dict)  # step id -> fence held by the killed processes
    completed_before: int = 0
    recovery_seconds: float | None = None


@dataclass
class Restart:
    cluster: str
    reason: str  # "group kill", "exited", "stale heartbeat"
    at: float


@dataclass
class SoakResult:
    vendor: str
    workflows: int
    steps: int
    clusters: int
    seconds: float
    kill_every: float
    seed: int
    elapsed: float = 0.0
    workflow_statuses: dict[str, int] = field(default_factory=dict)
    step_statuses: dict[str, int] = field(default_factory=dict)
    kills: list[Kill] = field(default_factory=list)
    restarts: list[Restart] = field(default_factory=list)
    unsettled: list[str] = field(default_factory=list)
    effects: int = 0
    duplicates: list[str] = field(default_factory=list)
    unrequested: list[str] = field(default_factory=list)
    keyless_effects: int = 0
    ticket_problems: list[str] = field(default_factory=list)
    double_successes: list[str] = field(default_factory=list)
    repeated_attempts: int = 0
    audit_ok: bool = False
    audit_events: int = 0
    audit_problems: list[str] = field(default_factory=list)
    # Everything at once (workflows.ops.chaos_load), when `storm`:
    storm: bool = False
    proofs_required: bool = False
    proofs_verified: int = 0  # ledger entries naming the verified proof of their own plan
    proof_problems: list[str] = field(default_factory=list)
    reviewer_approvals: int = 0
    reviewer_races: int = 0  # approvals refused because the plan had moved on or the other reviewer raced
    reviewer_errors: list[str] = field(default_factory=list)
    desk_faults: dict[str, int] = field(default_factory=dict)
    receiver_outages: int = 0
    webhook_deliveries: int = 0
    webhook_retried: int = 0  # deliveries that took more than one attempt
    webhook_repeats: int = 0  # extra arrivals of a webhook-id (at least once: allowed)
    webhook_missing: list[str] = field(default_factory=list)
    archive_runs: int = 0
    archived_workflows: int = 0
    archive_kept: int = 0
    archive_errors: list[str] = field(default_factory=list)
    bulk_jobs: list[dict] = field(default_factory=list)

    @property
    def unrecovered(self) -> int:
        return sum(k.recovery_seconds is None for k in self.kills)

    def recovery_summary(self, orphaning_only: bool = False) -> dict[str, float | None]:
        """min/median/p95/max seconds to recover, over every kill or only
        over those that left steps in the killed processes' hands."""
        times = sorted(
            k.recovery_seconds
            for k in self.kills
            if k.recovery_seconds is not None and (k.orphans or not orphaning_only)
        )
        if not times:
            return {"min": None, "median": None, "p95": None, "max": None}
        p95 = statistics.quantiles(times, n=20, method="inclusive")[18] if len(times) > 1 else times[0]
        return {"min": times[0], "median": statistics.median(times), "p95": p95, "max": times[-1]}

    @property
    def terminated_sessions(self) -> int:
        return sum(len(k.targets) for k in self.kills if k.kind == "sessions")

    @property
    def passed(self) -> bool:
        # A soak in which nothing took effect proved nothing.
        return not (
            self.effects == 0
            or self.unsettled
            or self.duplicates
            or self.unrequested
            or self.ticket_problems
            or self.double_successes
            or self.keyless_effects
            or not self.audit_ok
            or self.proof_problems
            or self.webhook_missing
            or self.archive_errors
            or any(job["status"] != "DONE" for job in self.bulk_jobs)
        )

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "recovery": self.recovery_summary(),
            "recovery_with_orphans": self.recovery_summary(orphaning_only=True),
            "recovery_median_seconds": self.recovery_summary()["median"],
            "recovery_max_seconds": self.recovery_summary()["max"],
            "unrecovered": self.unrecovered,
            "terminated_sessions": self.terminated_sessions,
            "passed": self.passed,
        }

    def report(self) -> str:
        def spread(summary):
            return "  ".join(
                f"{name} {'-' if summary[name] is None else f'{summary[name]:.2f}'}"
                for name in ("min", "median", "p95", "max")
            )

        kinds = Counter(k.kind for k in self.kills)
        reasons = Counter(r.reason for r in self.restarts)
        rows = [
            ("database", self.vendor),
            (
                "soak",
                f"{self.seconds:.0f} s, kill every {self.kill_every} s, seed {self.seed}, "
                f"{self.clusters} clusters, {self.elapsed:.1f} s in all",
            ),
            ("workflows", f"{self.workflows}: " + _counts(self.workflow_statuses)),
            ("steps", f"{self.steps}: " + _counts(self.step_statuses)),
            (
                "kills",
                f"{len(self.kills)}: "
                + _counts(kinds, KINDS)
                + f"; proven {sum(k.proven for k in self.kills)}/{len(self.kills)}",
            ),
            ("sessions terminated", str(self.terminated_sessions)),
            ("restarts", f"{len(self.restarts)}: " + (_counts(reasons) or "none")),
            ("recovery (s)", f"{spread(self.recovery_summary())}  (unrecovered {self.unrecovered})"),
            (
                "  orphaning kills",
                f"{spread(self.recovery_summary(orphaning_only=True))}  "
                f"({sum(bool(k.orphans) for k in self.kills)} kills left "
                f"{sum(len(k.orphans) for k in self.kills)} steps behind)",
            ),
            (
                "effects",
                f"{self.effects} in the ledger; duplicates {len(self.duplicates)}; without an earlier "
                f"REQUESTED attempt {len(self.unrequested)}; without a key {self.keyless_effects}",
            ),
            ("repeated attempts", f"{self.repeated_attempts} (absorbed by idempotency keys or reconciled)"),
            ("double successes", str(len(self.double_successes))),
            ("ticket problems", str(len(self.ticket_problems))),
            ("unsettled", str(len(self.unsettled))),
            ("audit", f"{'OK' if self.audit_ok else 'BROKEN'} ({self.audit_events} events)"),
        ]
        if self.storm:
            rows += self._storm_rows()
        rows.append(("result", "PASS" if self.passed else "FAIL"))
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        for title, items in (
            ("duplicate", self.duplicates),
            ("unrequested", self.unrequested),
            ("ticket", self.ticket_problems),
            ("double success", self.double_successes),
            ("unsettled", self.unsettled),
            ("audit", self.audit_problems),
            ("proof", self.proof_problems),
            ("webhook missing", self.webhook_missing),
            ("archive", self.archive_errors),
            ("reviewer", self.reviewer_errors),
        ):
            lines += [f"  {title}: {item}" for item in items[:20]]
        return "\n".join(lines)

    def _storm_rows(self) -> list[tuple[str, str]]:
        jobs = "; ".join(
            f"{job['status']} {job['total']} entries (applied {job['applied']}, safe {job['safe']}, "
            f"in doubt {job['in_doubt']}, failed {job['failed']})"
            for job in self.bulk_jobs
        )
        return [
            (
                "proofs",
                f"{self.proofs_verified}/{self.effects} effects carried a verified proof of their plan; "
                f"problems {len(self.proof_problems)}"
                if self.proofs_required
                else "not required by this desk",
            ),
            (
                "reviewers",
                f"{self.reviewer_approvals} approvals from two threads; {self.reviewer_races} refused "
                f"(plan moved on or raced); errors {len(self.reviewer_errors)}",
            ),
            ("desk faults", _counts(self.desk_faults) or "none"),
            (
                "webhooks",
                f"{self.webhook_deliveries} deliveries, {self.receiver_outages} receiver outages, "
                f"{self.webhook_retried} retried, {self.webhook_repeats} repeats (at least once), "
                f"missing {len(self.webhook_missing)}",
            ),
            (
                "archive",
                f"{self.archive_runs} runs, {self.archived_workflows} workflows moved out, "
                f"{self.archive_kept} kept (changed meanwhile); problems {len(self.archive_errors)}",
            ),
            ("bulk reconcile", jobs or "none"),
        ]


def _counts(counter, order=None) -> str:
    keys = order or sorted(counter)
    return "  ".join(f"{key} {counter.get(key, 0)}" for key in keys if order or counter.get(key))
