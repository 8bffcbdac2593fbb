"""`docs_reference`: write (or check) the generated pages of docs/reference/."""

from pathlib import Path

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.ops import reference


class Command(BaseCommand):
    help = (
        "Write docs/reference/ (HTTP API, settings, commands, states, audit events) from the code that "
        "defines them; --check writes nothing and fails when a page on disk differs."
    )

    def add_arguments(self, parser):
        parser.add_argument("--check", action="store_true", help="fail, naming each stale page, instead of writing")

    def handle(self, *args, check=False, **options):
        pages = reference.generate()
        stale = reference.stale(pages)
        shown = [str(path.relative_to(Path(settings.BASE_DIR))) for path in stale]
        if check:
            if stale:
                raise CommandError(f"stale: {', '.join(shown)} (run `python manage.py docs_reference`)")
            self.stdout.write(f"{len(pages)} reference pages up to date")
            return
        for path in stale:
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_text(pages[path])
        self.stdout.write(
            f"wrote {len(stale)} of {len(pages)} reference pages" + (f": {', '.join(shown)}" if shown else "")
        )
