from datetime import timedelta

from django.conf import settings
from django.core.management.base import BaseCommand, CommandError

from workflows.audit import signing


class Command(BaseCommand):
    help = (
        "Manage the Ed25519 signing key set (SIGNING_KEYS_FILE): add a key and make it current, or retire one "
        "(it signs nothing more and stays published for SIGNING_KEY_OVERLAP_HOURS). Without an option, list it."
    )

    def add_arguments(self, parser):
        group = parser.add_mutually_exclusive_group()
        group.add_argument("--new", action="store_true", help="Add a key and make it current.")
        group.add_argument("--retire", metavar="KID", help="Stop signing with this key.")

    def handle(self, *args, new=False, retire=None, **options):
        try:
            if new:
                key = signing.new_key()
                self.stdout.write(f"new current signing key {key.kid} in {signing.keys_path()}")
                return
            if retire:
                key = signing.retire(retire)
                until = key.retired + timedelta(hours=settings.SIGNING_KEY_OVERLAP_HOURS)
                self.stdout.write(
                    f"retired {key.kid}: it signs nothing more; published until {until:%Y-%m-%d %H:%M} UTC"
                )
                return
        except signing.SigningKeyError as exc:
            raise CommandError(str(exc)) from None
        keys = signing.keyset()
        published = {key.kid for key in keys.published()}
        for key in keys.keys:
            state = "current" if key is keys.current else ("retired" if key.retired else "active")
            shown = "published" if key.kid in published else "no longer published"
            self.stdout.write(f"{key.kid}  {state}, {shown}, created {key.created:%Y-%m-%d %H:%M}")
