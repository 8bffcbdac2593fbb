from django.contrib.auth import get_user_model
from django.core.management.base import BaseCommand, CommandError

from workflows import persons as person_keys
from workflows.errors import DomainError
from workflows.models import AgentOwner
from workflows.operations import chat_links, persons


def _user(username: str):
    user = get_user_model().objects.filter(username=username).first()
    if user is None:
        raise CommandError(f"No user named {username!r}.")
    return user


class Command(BaseCommand):
    help = (
        "Accounts of one person, for four-eyes only: `link USER_A USER_B` makes two accounts one person "
        "(neither may then approve what the other submitted or edited); `show USER` lists them; "
        "`link-slack USER SLACK_ID` lets a Slack user of SLACK_TEAM_ID decide as USER."
    )

    def add_arguments(self, parser):
        sub = parser.add_subparsers(dest="verb", required=True)
        linking = sub.add_parser("link", help="Make two accounts one person.")
        linking.add_argument("user_a")
        linking.add_argument("user_b")
        slack = sub.add_parser("link-slack", help="Link a Slack user (U…) of SLACK_TEAM_ID to an account, by hand.")
        slack.add_argument("user")
        slack.add_argument("slack_id")
        showing = sub.add_parser("show", help="The accounts of a user's person, and the agents they own.")
        showing.add_argument("user")

    def handle(self, *args, verb, **options):
        if verb == "link":
            a, b = _user(options["user_a"]), _user(options["user_b"])
            try:
                person = persons.link(a, b, by=None)
            except DomainError as exc:
                raise CommandError(exc.message) from exc
            self.stdout.write(f"{a.get_username()} and {b.get_username()} are one person ({person}).")
            return
        user = _user(options["user"])
        if verb == "link-slack":
            try:
                before = chat_links.link_by_hand(user, options["slack_id"])
            except DomainError as exc:
                raise CommandError(exc.message) from exc
            replaced = f" (instead of {before})" if before else ""
            self.stdout.write(f"Slack user {options['slack_id']} decides as {user.get_username()}{replaced}.")
            return
        names = dict(
            get_user_model().objects.values_list("pk", "username").filter(pk__in=person_keys.accounts_of(user))
        )
        self.stdout.write(f"person: {person_keys.key(user)}")
        self.stdout.write("accounts: " + ", ".join(sorted(names.values())))
        owned = AgentOwner.objects.filter(owner_id__in=names).select_related("agent").order_by("agent__username")
        self.stdout.write("agents owned: " + (", ".join(o.agent.get_username() for o in owned) or "none"))
