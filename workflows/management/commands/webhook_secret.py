from django.conf import settings
from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError
from django.db import transaction

from workflows.audit import journal
from workflows.webhooks import keys


class Command(BaseCommand):
    help = (
        "Make a webhook signing secret for USERNAME and print it this once: it signs the callbacks of that "
        "user's plans. Without --rotate it replaces the user's secrets at once; with --rotate the old one "
        "keeps signing too for WEBHOOK_ROTATION_HOURS."
    )

    def add_arguments(self, parser):
        parser.add_argument("username")
        parser.add_argument("--rotate", action="store_true", help="Keep the current secret signing for a while.")

    def handle(self, *args, username, rotate=False, **options):
        user = get_user_model().objects.filter(username=username).first()
        if user is None:
            raise CommandError(f"no user {username!r}")
        with transaction.atomic():
            secret = keys.issue(user=user, rotate=rotate)
            journal.append(
                actor="manage.py",
                verb="webhook_secret.rotated" if rotate else "webhook_secret.issued",
                obj_type="user",
                obj_id=user.pk,
                data={"username": username},
            )
        self.stdout.write(secret)
        if rotate:
            self.stderr.write(f"the previous secret keeps signing for {settings.WEBHOOK_ROTATION_HOURS:g} hour(s)")
