"""Who clicks in Slack (docs/explanation/chat-decisions.md#chat-decisions):
a Slack user of the one workspace linked to a console account by a
handshake or by hand, never by a chat profile; the signatures of the
interactions received (each is accepted once); the link tokens used."""

from django.conf import settings
from django.db import models
from django.utils import timezone


class SlackIdentity(models.Model):
    """A Slack user (`slack_user`, within workspace `team`) whose clicks
    decide as `user`. One Slack user is one account, and an account has one
    Slack user per workspace."""

    class Via(models.TextChoices):
        HANDSHAKE = "handshake"  # the person signed in to the console and confirmed
        MANUAL = "manual"  # `manage.py person link-slack`

    team = models.CharField(max_length=32)
    slack_user = models.CharField(max_length=32)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="slack_identities")
    via = models.CharField(max_length=16, choices=Via.choices)
    linked_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [
            models.UniqueConstraint(fields=["team", "slack_user"], name="slack_identity_unique"),
            models.UniqueConstraint(fields=["team", "user"], name="slack_identity_one_per_account"),
        ]

    def __str__(self) -> str:
        return f"{self.slack_user} in {self.team} is {self.user}"


class SlackSignature(models.Model):
    """An interaction's `X-Slack-Signature`, received once: the unique row
    refuses a replay, whoever inserts second. `sent_at` is Slack's request
    timestamp; rows leave once it is out of the window (`chat_clicks`).
    `handled_at`: the worker decided the click (a task taken twice decides
    once)."""

    signature = models.CharField(max_length=80, unique=True)
    sent_at = models.DateTimeField(db_index=True)
    handled_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return self.signature[:16]


class UsedSlackLink(models.Model):
    """A linking handshake's token that linked (`chat_links`): each token's
    nonce once."""

    nonce = models.CharField(max_length=32, unique=True)
    slack_user = models.CharField(max_length=32)
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="+")
    used_at = models.DateTimeField(default=timezone.now)
