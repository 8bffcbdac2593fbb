"""`seed_scale`: bulk history for measuring the console at scale (see workflows.ops.seed).

python manage.py seed_scale --workflows 100000 --events 1000000 [--batch 5000]
"""

import time

from django.core.management.base import BaseCommand, CommandError

from workflows.ops.seed import Seeder


class Command(BaseCommand):
    help = "Bulk-seed workflows, steps, attempts, dead letters and hash-chained audit events for benchmarks."

    def add_arguments(self, parser):
        parser.add_argument("--workflows", type=int, default=100_000)
        parser.add_argument("--events", type=int, default=1_000_000, help="audit events in all")
        parser.add_argument("--batch", type=int, default=5000, help="workflows per transaction")

    def handle(self, *args, workflows, events, batch, **options):
        if workflows < 0 or events < 0 or batch < 1:
            raise CommandError("--workflows and --events must not be negative, --batch at least 1")
        if events and not workflows:
            raise CommandError("audit events belong to workflows: --events needs --workflows")
        began = time.monotonic()
        counts = Seeder(workflows, events, batch, log=self.stdout.write).run()
        elapsed = time.monotonic() - began
        rows = sum(counts.values())
        self.stdout.write(", ".join(f"{name} {n:,}" for name, n in counts.items()))
        self.stdout.write(f"seeded {rows:,} rows in {elapsed:.1f} s ({rows / max(elapsed, 1e-9):,.0f} rows/s)")
