from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from workflows.ages import parse_age
from workflows.audit import archive
from workflows.errors import DomainError


class Command(BaseCommand):
    help = (
        "Move finished workflows older than the cutoff (--older-than, else each team's retention_days) with "
        "every row of theirs into compressed JSON Lines files and a signed manifest in DIR, record the archive "
        "in the live audit chain, then delete them in short batches "
        "(docs/explanation/operations-at-scale.md#operations-at-scale)."
    )

    def add_arguments(self, parser):
        parser.add_argument(
            "--older-than",
            metavar="AGE",
            help="Archive workflows last changed longer ago than this (90d, 12h, 30m) in every "
            "team. Left out: each team's retention_days (teams without one are kept).",
        )
        parser.add_argument("--to", required=True, metavar="DIR", help="A new (or empty) directory for the archive.")
        parser.add_argument(
            "--batch",
            type=int,
            default=archive.DEFAULT_BATCH,
            help=f"Workflows per file chunk and per delete transaction (default {archive.DEFAULT_BATCH}).",
        )

    def handle(self, *args, older_than=None, to=None, batch=None, **options):
        try:
            age = parse_age(older_than) if older_than is not None else None
        except DomainError as exc:
            raise CommandError(exc.message) from None
        try:
            done = archive.write(
                Path(to),
                older_than=age,
                batch=batch,
                by="manage.py archive",
                progress=lambda text: self.stdout.write(text),
            )
        except archive.ArchiveError as exc:
            raise CommandError(str(exc)) from exc
        if done.archive is None:
            return
        self.stdout.write(
            f"Archived {done.workflows} workflows to {done.directory} (manifest {done.digest}); "
            f"deleted {done.deleted} from the database."
        )
        if done.kept:
            self.stdout.write(
                f"{len(done.kept)} changed while being archived and were kept in the database: "
                + ", ".join(done.kept[:20])
                + (" ..." if len(done.kept) > 20 else "")
            )
