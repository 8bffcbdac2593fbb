"""The demo: its users (one per role, password `durable-demo`) and a few
sample plans. Safe to seed again."""

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.db import transaction

from workflows import roles
from workflows.operations import plans

PASSWORD = "durable-demo"
USERS = {
    "reviewer": [roles.REVIEWERS],
    "reviewer2": [roles.REVIEWERS],
    "operator": [roles.OPERATORS],
    "auditor": [roles.AUDITORS],
    "agent": [],
    "admin": [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS],
}

SAMPLES = [
    {
        "name": "Open an incident ticket and note the follow-up",
        "submission_key": "demo-incident-1",
        "context": {"reason": "Disk usage above 90% on db-2"},
        "steps": [
            {
                "key": "open",
                "action": "ticket.create",
                "args": {"title": "Disk usage above 90% on db-2", "body": "Opened by the capacity agent."},
            },
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.id"}, "body": "Cleanup job scheduled for tonight."},
            },
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
        ],
    },
    {
        "name": "Dry run: three no-op steps",
        "submission_key": "demo-noop-1",
        "steps": [{"key": f"step-{n}", "action": "noop", "args": {"n": n}} for n in range(1, 4)],
    },
    {
        "name": "Customer follow-up ticket <b>with markup in its name</b>",
        "submission_key": "demo-followup-1",
        "steps": [
            {
                "key": "ticket",
                "action": "ticket.create",
                "args": {"title": "<script>alert('agent text is data')</script>", "body": "Escaped, never run."},
            },
        ],
    },
]


@transaction.atomic
def seed() -> None:
    User = get_user_model()
    for username, groups in USERS.items():
        user, created = User.objects.get_or_create(username=username)
        if created:
            user.set_password(PASSWORD)
            user.is_staff = user.is_superuser = username == "admin"
            user.save()
        user.groups.add(*Group.objects.filter(name__in=groups))
    agent = User.objects.get(username="agent")
    for body in SAMPLES:
        plans.submit(agent, body)
