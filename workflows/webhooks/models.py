"""The webhook tables: endpoints, signing secrets (encrypted) and the outbox.

Defined here, registered with the `workflows` app through `workflows.models`.
"""

import uuid

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows import roles, teams


class WebhookEndpointQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Its team's operators and auditors."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "webhooks"):
            return self.none()
        return self.filter(team_id__in=teams.team_ids(user))


class WebhookEndpoint(models.Model):
    """An operator's receiver of every event of one team's plans."""

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    team = models.ForeignKey(
        "workflows.Team", on_delete=models.PROTECT, related_name="+", default=teams.default_team_id
    )
    url = models.CharField(max_length=2048)
    description = models.CharField(max_length=200, blank=True, default="")
    enabled = models.BooleanField(default=True)
    created_by = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    created_at = models.DateTimeField(default=timezone.now)

    objects = WebhookEndpointQuerySet.as_manager()

    def __str__(self) -> str:
        return f"webhook endpoint {self.url}"


class WebhookSecret(models.Model):
    """A signing secret, Fernet-encrypted under WEBHOOK_SECRET_KEYS: a user's
    (it signs the callbacks of that user's plans) or an endpoint's. A secret
    replaced by rotation keeps signing until `retires_at`."""

    user = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="secrets"
    )
    encrypted = models.TextField()
    created_at = models.DateTimeField(default=timezone.now)
    retires_at = models.DateTimeField(null=True, blank=True)

    class Meta:
        constraints = [
            models.CheckConstraint(
                condition=Q(user__isnull=True) ^ Q(endpoint__isnull=True), name="webhook_secret_one_owner"
            ),
        ]


class WebhookDeliveryQuerySet(models.QuerySet):
    def due(self, now=None):
        return self.filter(status=WebhookDelivery.Status.PENDING, next_attempt_at__lte=now or timezone.now())

    def visible_to(self, user):
        """Those about the workflows of the user's teams, for their
        operators and auditors."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "webhooks"):
            return self.none()
        return self.filter(workflow__team_id__in=teams.team_ids(user))


class WebhookDelivery(models.Model):
    """One event for one receiver: the outbox row the workers deliver.

    Its id is the `webhook-id` every attempt and every replay sends, and
    `body` the exact bytes signed, so a receiver can drop repeats.
    A claim bumps `fence` and pushes `next_attempt_at` one lease ahead: a
    worker that dies mid-call leaves the row due again when the lease ends.
    """

    class Status(models.TextChoices):
        PENDING = "PENDING"
        DELIVERED = "DELIVERED"
        DEAD = "DEAD"

    id = models.UUIDField(primary_key=True, default=uuid.uuid4, editable=False)
    event = models.CharField(max_length=64)
    workflow = models.ForeignKey("workflows.Workflow", on_delete=models.CASCADE, related_name="+")
    # An operator's endpoint, or none: the plan's own callback_url, signed
    # with the secrets of `signer` (the plan's submitter).
    endpoint = models.ForeignKey(
        WebhookEndpoint, on_delete=models.CASCADE, null=True, blank=True, related_name="deliveries"
    )
    url = models.CharField(max_length=2048, blank=True, default="")
    signer = models.ForeignKey(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, null=True, blank=True, related_name="+"
    )
    body = models.TextField()
    status = models.CharField(max_length=16, choices=Status.choices, default=Status.PENDING)
    attempts = models.PositiveIntegerField(default=0)
    # Attempts numbered above this belong to the current run: a replay
    # starts a fresh budget.
    retry_base = models.PositiveIntegerField(default=0)
    fence = models.PositiveIntegerField(default=0)
    next_attempt_at = models.DateTimeField(null=True, blank=True)
    last_status_code = models.PositiveIntegerField(null=True, blank=True)
    last_error = models.TextField(blank=True, default="")
    created_at = models.DateTimeField(default=timezone.now)
    delivered_at = models.DateTimeField(null=True, blank=True)

    objects = WebhookDeliveryQuerySet.as_manager()

    class Meta:
        indexes = [
            models.Index(fields=["status", "next_attempt_at"], name="webhook_delivery_due"),
            models.Index(fields=["status", "-created_at", "id"], name="webhook_delivery_status"),
        ]

    def __str__(self) -> str:
        return f"{self.event} to {self.target_url} ({self.status})"

    @property
    def webhook_id(self) -> str:
        return f"msg_{self.id.hex}"

    @property
    def target_url(self) -> str:
        return self.endpoint.url if self.endpoint_id else self.url
