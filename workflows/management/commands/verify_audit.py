from django.core.management.base import BaseCommand, CommandError

from workflows.audit import journal


class Command(BaseCommand):
    help = (
        "Recompute every link of the audit trail (each with its own algorithm and key) and hold every stream to "
        "the latest signed checkpoint, or to the checkpoint file given; record the outcome (shown on the audit "
        "page) and exit non-zero naming the first broken link of each kind."
    )

    def add_arguments(self, parser):
        parser.add_argument("--stream", action="append", help="Only this stream (a workflow id, or 'system').")
        parser.add_argument(
            "--checkpoint",
            metavar="FILE",
            help="A checkpoint file written by `audit_checkpoint --out`, instead of the stored ones.",
        )
        parser.add_argument(
            "--jwks",
            metavar="FILE",
            help="Verify the checkpoint file with the public keys of this JWKS (as served at "
            "/.well-known/jwks.json) instead of the signing key set.",
        )

    def handle(self, *args, stream=None, checkpoint=None, jwks=None, **options):
        if jwks and not checkpoint:
            raise CommandError("--jwks verifies a checkpoint file: give --checkpoint FILE too")
        check = journal.record_verification(by="verify_audit", streams=stream, checkpoint=checkpoint, jwks=jwks)
        result = check.result
        held = f"held to {result.checkpoint}" if result.checkpoint else "no signed checkpoint to hold it to"
        archived = f", {result.archived} archived streams held to their archives" if result.archived else ""
        summary = f"{result.events} events in {result.streams} chains{archived}, {held}"
        if result.ok:
            self.stdout.write(f"audit chain OK: {summary}")
            return
        for kind, (problem, count) in result.first_of_each_kind().items():
            more = f" (and {count - 1} more of this kind)" if count > 1 else ""
            self.stderr.write(f"{kind}: {problem}{more}")
        raise CommandError(f"audit chain BROKEN: {check.problem_count} problem(s) in {summary}")
