from django.core.management.base import BaseCommand

from workflows.ops import demo


class Command(BaseCommand):
    help = "Create the demo users (password 'durable-demo') and a few sample plans. Safe to run again."

    def handle(self, *args, **options):
        demo.seed()
        self.stdout.write("Demo logins (password 'durable-demo'): " + ", ".join(demo.USERS))
