from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows.operations import tokens


class Command(BaseCommand):
    help = "Issue an API bearer token for a user. The token is printed once; only its hash is stored."

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--name", default="", help="A label to recognise the token by.")

    def handle(self, *args, username, name, **options):
        user = get_user_model().objects.filter(username=username, is_active=True).first()
        if user is None:
            raise CommandError(f"No active user named {username!r}.")
        self.stdout.write(tokens.issue(user, name=name))
