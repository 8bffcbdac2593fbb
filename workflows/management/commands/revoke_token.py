from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.operations import tokens


class Command(BaseCommand):
    help = "Revoke a user's API tokens: all of them, or the one starting with --prefix."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--prefix", help="The first characters of the token (as shown in the admin).")

    def handle(self, *args, username, prefix, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"No user named {username!r}.")
        count = tokens.revoke(user, prefix)
        self.stdout.write(f"Revoked {count} token(s) of {username}.")
