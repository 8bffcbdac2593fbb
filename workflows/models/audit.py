"""The audit trail's tables: the events, each stream's head, the signed
checkpoints and the verifications."""

from django.contrib.auth import get_user_model
from django.db import models
from django.db.models import Q
from django.db.models.functions import Cast
from django.utils import timezone

from workflows import roles, teams
from workflows.models.grants import StandingGrant
from workflows.models.jobs import Job
from workflows.models.plans import Workflow
from workflows.webhooks.models import WebhookEndpoint


class AuditEventQuerySet(models.QuerySet):
    """Audit events and checkpoints: rows are added, never changed or removed."""

    def update(self, **kwargs):
        raise PermissionError(f"{self.model._meta.verbose_name_plural} are append-only")

    def delete(self):
        raise PermissionError(f"{self.model._meta.verbose_name_plural} are append-only")

    def visible_to(self, user):
        """Global auditors see every event; others only their teams': of
        their teams' workflows, jobs, webhook endpoints and members (their
        sign-ins, tokens, break-glass), and of the teams themselves. Of the
        events about no workflow, those that concern every team (action
        policies and throttles, the trail's own keys and checkpoints) are
        seen by all; those about another team's objects, or about what no
        single team owns (linked persons, archives), are not. Only auditors
        read the trail."""
        if teams.is_global(user):
            return self
        if not roles.may_read(user, "audit"):
            return self.none()
        mine = teams.team_ids(user)
        endpoints = [str(pk) for pk in WebhookEndpoint.objects.visible_to(user).values_list("pk", flat=True)]
        jobs = [str(pk) for pk in Job.objects.visible_to(user).values_list("pk", flat=True)]
        grants = [str(pk) for pk in StandingGrant.objects.visible_to(user).values_list("pk", flat=True)]
        members = (
            get_user_model()
            .objects.filter(teams.members_of_q(mine))
            .annotate(key=Cast("pk", output_field=models.CharField()))
            .values("key")
        )
        return self.filter(
            Q(workflow_id__in=Workflow.objects.visible_to(user).values("pk"))
            | (Q(workflow_id__isnull=True) & ~Q(object_type__in=TEAM_SCOPED_EVENTS))
            | Q(object_type="webhook_endpoint", object_id__in=endpoints)
            | Q(object_type="team", object_id__in=[str(pk) for pk in mine])
            | Q(object_type="job", object_id__in=jobs)
            | Q(object_type="grant", object_id__in=grants)
            | Q(object_type="user", workflow_id__isnull=True, object_id__in=members)
        )


# The kinds of object an event about no workflow may name that belong to a
# team, or to no single one (`AuditEventQuerySet.visible_to`).
TEAM_SCOPED_EVENTS = ("webhook_endpoint", "team", "job", "user", "person", "archive", "workflow", "grant")


class AuditEvent(models.Model):
    """Append-only and hash-chained per stream (a workflow, or `system`).

    `hash` = HMAC-SHA256 under the audit key `key_id` (`hash_alg`
    `hmac-sha256`), or plain SHA-256 for rows written before keyed audit
    (`sha256`), over the previous hash and this event's canonical fields, so
    changing or removing any row breaks every later link.
    """

    SHA256 = "sha256"
    HMAC_SHA256 = "hmac-sha256"

    stream = models.CharField(max_length=64)
    seq = models.PositiveBigIntegerField()
    at = models.DateTimeField()
    actor = models.CharField(max_length=150)
    verb = models.CharField(max_length=64)
    object_type = models.CharField(max_length=32)
    object_id = models.CharField(max_length=64)
    workflow_id = models.UUIDField(null=True, blank=True)
    data = models.JSONField(default=dict)
    prev_hash = models.CharField(max_length=64)
    hash = models.CharField(max_length=64)
    hash_alg = models.CharField(max_length=16, choices=[(SHA256, SHA256), (HMAC_SHA256, HMAC_SHA256)])
    key_id = models.CharField(max_length=32, blank=True, default="")
    # Who was behind the actor (docs/explanation/teams.md#teams), hashed with the event when set:
    # the identity provider's subject and issuer for an SSO user, the API
    # token's id (its public prefix) for an agent, and the client address.
    subject = models.CharField(max_length=255, blank=True, default="", db_default="")
    issuer = models.CharField(max_length=255, blank=True, default="", db_default="")
    token_id = models.CharField(max_length=16, blank=True, default="", db_default="")
    client_address = models.CharField(max_length=45, blank=True, default="", db_default="")

    objects = AuditEventQuerySet.as_manager()

    class Meta:
        ordering = ["id"]
        constraints = [models.UniqueConstraint(fields=["stream", "seq"], name="audit_stream_seq_unique")]
        indexes = [
            models.Index(fields=["workflow_id", "id"], name="audit_workflow"),
            models.Index(fields=["actor", "id"], name="audit_actor"),
            models.Index(fields=["verb", "id"], name="audit_verb"),
            models.Index(fields=["at"], name="audit_at"),
        ]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {self.actor} {self.verb} {self.object_type}:{self.object_id}"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit events are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit events are append-only")


class AuditHead(models.Model):
    """The last link of each audit stream; its row lock orders appends."""

    stream = models.CharField(max_length=64, primary_key=True)
    seq = models.PositiveBigIntegerField(default=0)
    hash = models.CharField(max_length=64, default="0" * 64)


class AuditCheckpoint(models.Model):
    """One signed checkpoint of the audit streams; see workflows.audit.checkpoints.

    `statement` is the zlib-compressed canonical JSON that `signature`
    (Ed25519, key `kid`) signs; `digest` is its SHA-256, which the next
    checkpoint names as `prev`. Append-only, like the events.
    """

    number = models.PositiveBigIntegerField(unique=True)
    at = models.DateTimeField()
    kid = models.CharField(max_length=64)
    prev = models.CharField(max_length=64, blank=True, default="")
    digest = models.CharField(max_length=64)
    statement = models.BinaryField()
    signature = models.CharField(max_length=128)
    total = models.PositiveBigIntegerField()
    streams = models.PositiveIntegerField()
    changed = models.PositiveIntegerField()

    objects = AuditEventQuerySet.as_manager()

    def __str__(self) -> str:
        return f"checkpoint {self.number} at {self.at:%Y-%m-%d %H:%M:%S} ({self.changed} of {self.streams} streams)"

    def save(self, *args, **kwargs):
        if self.pk is not None:
            raise PermissionError("audit checkpoints are append-only")
        super().save(*args, **kwargs)

    def delete(self, *args, **kwargs):
        raise PermissionError("audit checkpoints are append-only")


class AuditCheckpointHead(models.Model):
    """Each stream's head as the latest checkpoint signed it: what lets the
    next checkpoint hold only the streams that changed. A cache, never
    trusted by verification (which folds the signed checkpoints)."""

    stream = models.CharField(max_length=64, primary_key=True)
    seq = models.PositiveBigIntegerField()
    hash = models.CharField(max_length=64)


class AuditVerification(models.Model):
    """One check of the audit chain (`verify_audit` or the console's "Verify
    now"), kept so auditors can see when the chain was last proven intact."""

    MAX_PROBLEMS = 50

    at = models.DateTimeField(default=timezone.now)
    by = models.CharField(max_length=150)
    # "" is every stream; otherwise the streams checked, comma-separated.
    scope = models.TextField(blank=True, default="")
    ok = models.BooleanField()
    events = models.PositiveBigIntegerField()
    streams = models.PositiveIntegerField()
    problem_count = models.PositiveIntegerField()
    problems = models.JSONField(default=list)
    seconds = models.FloatField()

    class Meta:
        indexes = [models.Index(fields=["scope", "-id"], name="audit_verification_scope")]

    def __str__(self) -> str:
        return f"{self.at:%Y-%m-%d %H:%M:%S} {'OK' if self.ok else 'BROKEN'} ({self.scope or 'all streams'})"
