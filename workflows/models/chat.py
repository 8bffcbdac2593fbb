"""Chat messages: one row for each Slack message the console keeps current
(docs/guides/slack-admins.md#when-slack-is-slow-down-or-rate-limiting).

A change of what a message shows only bumps `version`, in the transaction
of the change (`workflows.chat.marks`); a worker task renders the row's
subject as it then stands and posts or updates the message
(`workflows.chat.slack.send_due`), recording the version it showed. So the
newest state wins, a slow or absent Slack delays nothing else, and a
message is posted once: the row keeps its channel and `ts`.
"""

from django.db import models
from django.db.models import F, Q
from django.utils import timezone


class ChatMessageQuerySet(models.QuerySet):
    def pending(self):
        """Rows whose message does not show their newest state yet."""
        return self.filter(version__gt=F("sent_version"))

    def due(self, now=None):
        """Pending rows that may be sent now: no Retry-After or back-off
        running, no worker holding them."""
        now = now or timezone.now()
        return (
            self.pending()
            .filter(Q(not_before__isnull=True) | Q(not_before__lte=now))
            .filter(Q(claimed_until__isnull=True) | Q(claimed_until__lte=now))
        )


class ChatMessage(models.Model):
    class Kind(models.TextChoices):
        PLAN = "plan"
        GATE = "gate"
        COMPENSATION = "compensation"

    workflow = models.ForeignKey("workflows.Workflow", on_delete=models.CASCADE, related_name="+")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    # The gate's step key, or the compensation's id; "" for the plan.
    key = models.CharField(max_length=80, blank=True, default="")
    channel = models.CharField(max_length=32)
    # Slack's id of the message, once posted: a message is posted at most once.
    ts = models.CharField(max_length=32, blank=True, default="")
    version = models.PositiveIntegerField(default=1)
    sent_version = models.PositiveIntegerField(default=0)
    # What the message shows now (a digest of its blocks): an unchanged
    # rendering is not sent again.
    sent_digest = models.CharField(max_length=64, blank=True, default="")
    # Slack's Retry-After, or the back-off while Slack cannot be reached.
    not_before = models.DateTimeField(null=True, blank=True)
    # A worker sending it holds it until then (a conditional update).
    claimed_until = models.DateTimeField(null=True, blank=True)
    failures = models.PositiveIntegerField(default=0)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    sent_at = models.DateTimeField(null=True, blank=True)

    objects = ChatMessageQuerySet.as_manager()

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "kind", "key"], name="chat_message_subject")]
        indexes = [models.Index(fields=["id"], condition=Q(version__gt=F("sent_version")), name="chat_message_pending")]

    def __str__(self) -> str:
        return f"{self.kind} message of {self.workflow_id} {self.key}".strip()
