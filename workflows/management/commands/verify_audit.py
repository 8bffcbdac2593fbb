from django.core.management.base import BaseCommand, CommandError

from workflows import audit


class Command(BaseCommand):
    help = "Recompute every link of the audit trail; exit non-zero if anything was altered or removed."

    def add_arguments(self, parser):
        parser.add_argument("--stream", action="append", help="Only this stream (a workflow id, or 'system').")

    def handle(self, *args, stream=None, **options):
        result = audit.verify(stream)
        for problem in result.problems[:100]:
            self.stderr.write(problem)
        summary = f"{result.events} events in {result.streams} chains"
        if not result.ok:
            raise CommandError(f"audit chain BROKEN: {len(result.problems)} problem(s) in {summary}")
        self.stdout.write(f"audit chain OK: {summary}")
