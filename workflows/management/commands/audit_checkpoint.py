from pathlib import Path

from django.core.management.base import BaseCommand

from workflows.audit import checkpoints


class Command(BaseCommand):
    help = (
        "Write a signed checkpoint of every audit stream now (the worker writes one every "
        "AUDIT_CHECKPOINT_MINUTES); with --out, also the full signed state to a file kept outside the database."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--out",
            metavar="FILE",
            type=Path,
            help="Also write every stream's head, signed, to this file (verify_audit --checkpoint).",
        )

    def handle(self, *args, out=None, **options):
        written = checkpoints.write_now(full=out is not None)
        checkpoint = written.checkpoint
        self.stdout.write(
            f"checkpoint {checkpoint.number}: {checkpoint.total} events in {checkpoint.streams} "
            f"streams ({checkpoint.changed} changed), signed with key {checkpoint.kid}"
        )
        if out is not None:
            checkpoints.save(written.full, out)
            self.stdout.write(f"full checkpoint written to {out}")
