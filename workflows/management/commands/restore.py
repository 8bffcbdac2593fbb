from pathlib import Path

from django.core.management.base import BaseCommand, CommandError

from workflows.audit import archive, archived


class Command(BaseCommand):
    help = (
        "Bring one workflow back from an archive, read-only: the archive is verified first, then the workflow's "
        "rows and audit stream go back into the tables, marked restored (no operation or worker can change it)."
    )

    def add_arguments(self, parser):
        parser.add_argument("directory", metavar="DIR")
        parser.add_argument("--workflow", required=True, metavar="ID")
        parser.add_argument("--jwks", metavar="FILE", help="Verify the archive's signatures with this JWKS.")

    def handle(self, *args, directory, workflow, jwks=None, **options):
        try:
            restored = archived.restore(
                Path(directory), workflow, by="manage.py restore", jwks=Path(jwks) if jwks else None
            )
        except archive.ArchiveError as exc:
            raise CommandError(str(exc)) from exc
        self.stdout.write(f"Restored workflow {restored.pk} ({restored.name}, {restored.status}) read-only.")
