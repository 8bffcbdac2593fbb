"""`chaos`: the soak of workflows.ops.chaos against real clusters and a real desk.

    python manage.py chaos --soak 2m
    python manage.py chaos --workflows 200 --clusters 2 --seconds 120 --kill-every 2.0 --seed 1

Starts its own ticket desk (unless --desk-url) and its own `qcluster`
processes with the same environment and database, runs the soak, prints the
report and exits non-zero unless every check passed.

`--soak DURATION` runs everything at once for that long
(docs/development.md#chaos-soak-and-two-clusters): besides the kills, a desk
that requires approval proofs and injects faults, a webhook receiver down
and back, an archive run and a bulk reconcile while work is in flight, and
reviewers approving from threads. The archive takes every finished
workflow with nothing in flight: run it against a scratch database.
"""

import json
import logging
import os
from datetime import datetime
from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ages import parse_age
from workflows.audit import signing
from workflows.errors import DomainError
from workflows.ops import chaos, processes

# Workflows submitted per second of --soak (three steps each), unless --workflows says.
SOAK_RATE = 1.6


class Command(BaseCommand):
    help = "Run workflows while worker processes are SIGKILLed and their database sessions terminated."

    def add_arguments(self, parser):
        parser.add_argument(
            "--soak",
            metavar="DURATION",
            help="everything at once for this long (e.g. 90s, 2m, 30m): kills and session cuts, a proof desk "
            "injecting faults, a webhook receiver down and back, archive and bulk reconcile, reviewers in threads; "
            f"sets --seconds, and --workflows to {SOAK_RATE} a second unless given",
        )
        parser.add_argument("--workflows", type=int, default=None, help="plans to run (default 200)")
        parser.add_argument("--clusters", type=int, default=2)
        parser.add_argument("--seconds", type=float, default=120.0, help="how long to keep killing")
        parser.add_argument("--kill-every", type=float, default=2.0, help="mean seconds between kills")
        parser.add_argument("--seed", type=int, default=1)
        parser.add_argument(
            "--settle-seconds",
            type=float,
            default=120.0,
            help="how long to wait, after the kills, for every workflow to settle",
        )
        parser.add_argument("--lease-seconds", type=float, default=3.0, help="STEP_LEASE_SECONDS of the workers")
        parser.add_argument("--desk-latency-ms", type=int, default=50, help="latency injected into desk writes")
        parser.add_argument(
            "--desk-ignores-idempotency",
            action="store_true",
            help="the desk creates a new ticket for a repeated Idempotency-Key (lookup still works), "
            "so only reconciliation stands between a crash and a duplicate",
        )
        parser.add_argument(
            "--kinds",
            default=",".join(chaos.KINDS),
            help=f"comma-separated kinds of kill (default all: {','.join(chaos.KINDS)})",
        )
        parser.add_argument("--desk-url", help="use this ticket desk instead of starting one (no faults injected)")
        parser.add_argument("--workdir", help="logs and desk data (default var/chaos/<time>)")
        parser.add_argument("--json", dest="json_path", help="also write the result as JSON to this file")

    def handle(self, *args, **opts):
        storm = opts["soak"] is not None
        if storm:
            try:
                opts["seconds"] = parse_age(opts["soak"]).total_seconds()
            except DomainError:
                raise CommandError(
                    f"--soak {opts['soak']!r}: give a duration, a whole number and a unit (s, m or h): 90s, 2m, 30m"
                ) from None
            if not settings.DEBUG and not settings.WEBHOOK_SECRET_KEYS:
                raise CommandError("--soak registers a webhook endpoint: set WEBHOOK_SECRET_KEYS (or DEBUG=1)")
            if opts["desk_url"]:
                raise CommandError("--soak starts a desk of its own that requires proofs: drop --desk-url")
        if opts["workflows"] is None:
            opts["workflows"] = max(24, round(SOAK_RATE * opts["seconds"])) if storm else 200
        if opts["workflows"] < 1 or opts["clusters"] < 1 or opts["kill_every"] <= 0:
            raise CommandError("--workflows and --clusters must be at least 1 and --kill-every positive")
        kinds = [kind.strip() for kind in opts["kinds"].split(",") if kind.strip()]
        if not kinds or set(kinds) - set(chaos.KINDS):
            raise CommandError(f"--kinds takes some of: {', '.join(chaos.KINDS)}")
        logging.getLogger("django-q").setLevel(logging.WARNING)  # one "Enqueued" line per approval otherwise
        workdir = Path(opts["workdir"] or Path(settings.VAR_DIR) / "chaos" / datetime.now().strftime("%Y%m%d-%H%M%S"))
        env = {**chaos.CLUSTER_ENV, "STEP_LEASE_SECONDS": str(opts["lease_seconds"])}
        if storm:
            # The soak's webhook receiver listens on 127.0.0.1.
            settings.WEBHOOK_ALLOW_PRIVATE = True
            env["WEBHOOK_ALLOW_PRIVATE"] = "1"
        desk = None
        clusters = []
        try:
            desk_url = opts["desk_url"]
            if not desk_url:
                jwks = None
                if storm:
                    workdir.mkdir(parents=True, exist_ok=True)
                    jwks = workdir / "jwks.json"
                    jwks.write_text(json.dumps(signing.jwks()))
                desk = processes.DeskProcess(workdir / "desk.sqlite3", jwks=jwks).start()
                desk_url = desk.url
            # The previews the reviewers approve are computed here: they must
            # name the desk the workers will call, or every step is blocked.
            env["TICKET_DESK_URL"] = settings.TICKET_DESK_URL = desk_url
            for number in range(opts["clusters"]):
                clusters.append(processes.Cluster(f"cluster-{number + 1}", workdir, env).start())
            self.stdout.write(
                f"desk {desk_url}, {len(clusters)} clusters, {opts['workflows']} workflows, "
                f"{opts['seconds']:.0f} s of faults, logs in {workdir} (pid {os.getpid()})"
            )
            result = chaos.soak(
                clusters,
                desk_url=desk_url,
                workflows=opts["workflows"],
                seconds=opts["seconds"],
                kill_every=opts["kill_every"],
                seed=opts["seed"],
                settle_seconds=opts["settle_seconds"],
                desk_faults=self._desk_faults(opts) if desk else (),
                kinds=kinds,
                log=self.stdout.write,
                workdir=workdir,
                storm=storm,
                proofs=storm,
            )
        finally:
            for cluster in clusters:
                cluster.stop()
            if desk is not None:
                desk.stop()
        self.stdout.write("")
        self.stdout.write(result.report())
        if opts["json_path"]:
            Path(opts["json_path"]).write_text(json.dumps(result.as_dict(), indent=2, default=str))
        if not result.passed:
            raise CommandError("the soak failed: see the report above")

    @staticmethod
    def _desk_faults(opts) -> list[dict]:
        faults = [{"mode": "latency", "ms": opts["desk_latency_ms"]}] if opts["desk_latency_ms"] else []
        if opts["desk_ignores_idempotency"]:
            faults.append({"mode": "ignore_idempotency"})
        return faults
