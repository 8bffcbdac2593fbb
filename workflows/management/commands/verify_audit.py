from django.core.management.base import BaseCommand, CommandError

from workflows.models import AuditVerification


class Command(BaseCommand):
    help = (
        "Recompute every link of the audit trail and record the outcome (shown on the audit page); "
        "exit non-zero if anything was altered or removed."
    )

    def add_arguments(self, parser):
        parser.add_argument("--stream", action="append", help="Only this stream (a workflow id, or 'system').")

    def handle(self, *args, stream=None, **options):
        result = AuditVerification.run(by="verify_audit", streams=stream)
        for problem in result.problems:
            self.stderr.write(problem)
        if result.problem_count > len(result.problems):
            self.stderr.write(f"… and {result.problem_count - len(result.problems)} more")
        summary = f"{result.events} events in {result.streams} chains"
        if not result.ok:
            raise CommandError(f"audit chain BROKEN: {result.problem_count} problem(s) in {summary}")
        self.stdout.write(f"audit chain OK: {summary}")
