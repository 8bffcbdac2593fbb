"""`bench`: measure durable execution on this machine (see workflows.ops.bench).

    python manage.py bench [--steps 100000] [--clusters 1,2] [--workers-per-cluster N]
                           [--seed-workflows 10000 --seed-events 100000] [--waiters 200] [--dead-letters 2000]
                           [--archive-workflows 100000] [--lanes-steps 10000 --lanes-samples 20]
                           [--analytics-decisions 100000]
                           [--chat-samples 30 --chat-backlog 10000]
                           [--policy-sizes 10,100,1000 --policy-samples 200 --policy-path-samples 30]
                           [--soak 30m] [--skip a,b,... | --only a,b,...] [--json FILE]

Prints a table, with durable steps per second as a ratio of the raw
two-commit ceiling, writes the full result as JSON, and exits non-zero when
a part could not be measured. Goals are reported, not asserted. Use its own
database: it submits, approves and runs plans, and seeds history for (e).
"""

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ages import parse_age
from workflows.errors import DomainError
from workflows.ops import processes
from workflows.ops.bench import common, parts
from workflows.ops.bench.report import report


def _numbers(text: str, option: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise CommandError(f"{option} takes comma-separated numbers, e.g. 1,2; got {text!r}") from None
    if not values or min(values) < 1:
        raise CommandError(f"{option} needs at least one number, each at least 1; got {text!r}")
    return values


def _latencies(text: str) -> tuple[int, ...]:
    try:
        values = tuple(int(item) for item in text.split(",") if item.strip())
    except ValueError:
        raise CommandError(
            f"--remote-latency-ms takes comma-separated milliseconds, e.g. 0,100,300; got {text!r}"
        ) from None
    if not values or min(values) < 0 or max(values) > 60_000:
        raise CommandError(f"--remote-latency-ms needs at least one value, each 0 to 60000; got {text!r}")
    return values


class Command(BaseCommand):
    help = "Measure raw and durable throughput, latency, recovery, page times and worker memory."

    def add_arguments(self, parser):
        parser.add_argument(
            "--steps",
            type=int,
            default=common.MEMORY_STEPS,
            help="noop steps per cluster run (b); memory (f) is judged from 100000 up",
        )
        parser.add_argument("--steps-per-workflow", type=int, default=5)
        parser.add_argument("--clusters", default="1,2", help="cluster counts to run (b) with")
        parser.add_argument("--workers-per-cluster", type=int, default=settings.Q_CLUSTER["workers"])
        parser.add_argument("--raw-seconds", type=float, default=5.0, help="per client count (a)")
        parser.add_argument("--raw-clients", default="1,4,8")
        parser.add_argument("--latency-samples", type=int, default=50)
        parser.add_argument("--recovery-runs", type=int, default=3, help="per recovery mode (d)")
        parser.add_argument("--seed-workflows", type=int, default=10_000, help="scale of (e); the shortfall is seeded")
        parser.add_argument("--seed-events", type=int, default=100_000)
        parser.add_argument("--page-requests", type=int, default=30)
        parser.add_argument("--lease-seconds", type=float, default=10.0, help="STEP_LEASE_SECONDS of the clusters")
        parser.add_argument(
            "--remote-latency-ms", default="0,100,300", help="(g): the desk's latency fault for each remote run, in ms"
        )
        parser.add_argument(
            "--remote-steps",
            type=int,
            default=common.REMOTE_STEPS,
            help="(g): ticket.create steps per remote run; memory is judged from 100000 up",
        )
        parser.add_argument(
            "--waiters", type=int, default=common.WAITERS, help="(h): agents waiting at once on one web process"
        )
        parser.add_argument(
            "--dead-letters",
            type=int,
            default=common.DEAD_LETTERS,
            help="(i): dead letters reconciled and replayed in bulk",
        )
        parser.add_argument(
            "--archive-workflows",
            type=int,
            default=common.ARCHIVE_WORKFLOWS,
            help="(j): finished workflows seeded, then archived while a cluster runs",
        )
        parser.add_argument(
            "--lanes-steps",
            type=int,
            default=common.LANES_STEPS,
            help="(k): due steps of the backlog notices and previews are delivered under",
        )
        parser.add_argument(
            "--lanes-samples", type=int, default=common.LANES_SAMPLES, help="(k): notices timed idle and under it"
        )
        parser.add_argument(
            "--analytics-decisions",
            type=int,
            default=common.ANALYTICS_DECISIONS,
            help="(l): review endings seeded in the analytics tables, then answered over HTTP",
        )
        parser.add_argument(
            "--chat-samples",
            type=int,
            default=common.CHAT_SAMPLES,
            help="(m): plans submitted through the API, each timed until the Slack stand-in receives it",
        )
        parser.add_argument(
            "--chat-backlog",
            type=int,
            default=common.CHAT_BACKLOG,
            help="(m): due steps queued before, that the worker runs meanwhile",
        )
        parser.add_argument(
            "--policy-sizes",
            default=",".join(str(n) for n in common.POLICY_SIZES),
            help="(o): policies in the team's live set, one run each",
        )
        parser.add_argument(
            "--policy-samples",
            type=int,
            default=common.POLICY_SAMPLES,
            help="(o): evaluations of a plan timed in process, per size",
        )
        parser.add_argument(
            "--policy-path-samples",
            type=int,
            default=common.POLICY_PATH_SAMPLES,
            help="(o): plans submitted and approved through the API, per size and for the baseline",
        )
        parser.add_argument(
            "--soak",
            metavar="DURATION",
            default="",
            help="(q): run the chaos soak (manage.py chaos --soak) this long, e.g. 30m; left out unless given",
        )
        parser.add_argument("--skip", default="", help=f"parts to leave out, of {','.join(common.SECTIONS)}")
        parser.add_argument("--only", default="", help="the parts to run, leaving out every other (not with --skip)")
        parser.add_argument("--json", dest="json_path", help="default var/bench/bench-<time>.json")
        parser.add_argument("--workdir", help="cluster logs (default var/bench/<time>)")

    def handle(self, *args, **opts):
        skip = frozenset(part.strip() for part in opts["skip"].split(",") if part.strip())
        only = frozenset(part.strip() for part in opts["only"].split(",") if part.strip())
        for name, given in (("--skip", skip), ("--only", only)):
            if given - set(common.SECTIONS):
                raise CommandError(f"{name} takes some of {','.join(common.SECTIONS)}; got {opts[name[2:]]!r}")
        if skip and only:
            raise CommandError("--skip and --only: give one of them")
        if only:
            skip = frozenset(common.SECTIONS) - only
        if (
            min(
                opts["steps"],
                opts["steps_per_workflow"],
                opts["workers_per_cluster"],
                opts["latency_samples"],
                opts["recovery_runs"],
                opts["page_requests"],
                opts["remote_steps"],
                opts["waiters"],
                opts["dead_letters"],
                opts["archive_workflows"],
                opts["lanes_steps"],
                opts["lanes_samples"],
                opts["analytics_decisions"],
                opts["chat_samples"],
                opts["chat_backlog"],
                opts["policy_samples"],
                opts["policy_path_samples"],
            )
            < 1
            or opts["raw_seconds"] <= 0
        ):
            raise CommandError("sizes must be at least 1 and --raw-seconds positive")
        if opts["soak"]:
            try:
                parse_age(opts["soak"])
            except DomainError:
                raise CommandError(f"--soak {opts['soak']!r}: give a duration such as 30m") from None
        stamp = datetime.now().strftime("%Y%m%d-%H%M%S")
        base = Path(settings.VAR_DIR) / "bench"
        options = common.Options(
            steps=opts["steps"],
            steps_per_workflow=opts["steps_per_workflow"],
            clusters=_numbers(opts["clusters"], "--clusters"),
            workers_per_cluster=opts["workers_per_cluster"],
            raw_seconds=opts["raw_seconds"],
            raw_clients=_numbers(opts["raw_clients"], "--raw-clients"),
            latency_samples=opts["latency_samples"],
            recovery_runs=opts["recovery_runs"],
            seed_workflows=opts["seed_workflows"],
            seed_events=opts["seed_events"],
            page_requests=opts["page_requests"],
            lease_seconds=opts["lease_seconds"],
            skip=skip,
            soak=opts["soak"],
            remote_latency_ms=_latencies(opts["remote_latency_ms"]),
            remote_steps=opts["remote_steps"],
            waiters=opts["waiters"],
            dead_letters=opts["dead_letters"],
            archive_workflows=opts["archive_workflows"],
            lanes_steps=opts["lanes_steps"],
            lanes_samples=opts["lanes_samples"],
            analytics_decisions=opts["analytics_decisions"],
            chat_samples=opts["chat_samples"],
            chat_backlog=opts["chat_backlog"],
            policy_sizes=_numbers(opts["policy_sizes"], "--policy-sizes"),
            policy_samples=opts["policy_samples"],
            policy_path_samples=opts["policy_path_samples"],
            database_url=os.environ.get("DATABASE_URL") or processes.database_url(),
            workdir=Path(opts["workdir"] or base / stamp),
        )
        logging.getLogger("django-q").setLevel(logging.WARNING)  # one "Enqueued" line per approval otherwise
        result = parts.run(options, log=self.stdout.write)
        json_path = Path(opts["json_path"] or base / f"bench-{stamp}.json")
        json_path.parent.mkdir(parents=True, exist_ok=True)
        json_path.write_text(json.dumps(result, indent=2, default=str))
        self.stdout.write("")
        self.stdout.write(report(result))
        self.stdout.write(f"\nJSON: {json_path}")
        if result["errors"]:
            raise CommandError(f"part(s) {', '.join(result['errors'])} could not be measured: see above")
