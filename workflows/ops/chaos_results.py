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
        return not (
            self.unsettled
            or self.duplicates
            or self.unrequested
            or self.ticket_problems
            or self.double_successes
            or self.keyless_effects
            or not self.audit_ok
        )

    def as_dict(self) -> dict:
        return {
            **asdict(self),
            "recovery": self.recovery_summary(),
            "recovery_with_orphans": self.recovery_summary(orphaning_only=True),
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
            ("result", "PASS" if self.passed else "FAIL"),
        ]
        width = max(len(name) for name, _ in rows)
        lines = [f"{name.ljust(width)}  {value}" for name, value in rows]
        for title, items in (
            ("duplicate", self.duplicates),
            ("unrequested", self.unrequested),
            ("ticket", self.ticket_problems),
            ("double success", self.double_successes),
            ("unsettled", self.unsettled),
            ("audit", self.audit_problems),
        ):
            lines += [f"  {title}: {item}" for item in items[:20]]
        return "\n".join(lines)


def _counts(counter, order=None) -> str:
    keys = order or sorted(counter)
    return "  ".join(f"{key} {counter.get(key, 0)}" for key in keys if order or counter.get(key))
