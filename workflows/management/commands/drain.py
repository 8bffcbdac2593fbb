"""`drain`: stop a cluster gracefully (workflows.ops.draining)."""

import os

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ops import draining


class Command(BaseCommand):
    help = (
        "Stops a cluster on this host gracefully: it claims no more work, finishes the effects it has in "
        "flight, and exits."
    )

    def add_arguments(self, parser):
        parser.add_argument("--pid", type=int, help="the cluster's main process (qcluster)")
        parser.add_argument(
            "--heartbeat-file",
            default=os.environ.get("WORKER_HEARTBEAT_FILE"),
            help="the cluster's liveness file, which names its pid (default: WORKER_HEARTBEAT_FILE)",
        )
        parser.add_argument(
            "--timeout", type=float, default=None, help="seconds to wait for it (default: Q_TIMEOUT + 10)"
        )

    def handle(self, *args, pid=None, heartbeat_file=None, timeout=None, **options):
        timeout = timeout if timeout is not None else settings.Q_CLUSTER["timeout"] + 10
        if timeout <= 0:
            raise CommandError("--timeout must be a positive number of seconds")
        try:
            pid = pid if pid is not None else draining.cluster_pid(heartbeat_file)
            took = draining.drain(pid, timeout, self.stdout.write)
        except draining.DrainError as exc:
            raise CommandError(str(exc)) from None
        self.stdout.write(
            self.style.SUCCESS(f"cluster {pid} drained in {took:.1f} s; every effect it sent has its outcome recorded")
        )
