"""What reviewers decide and are told: approvals of a plan and of its
gates, review notices and the one-click links used."""

from django.conf import settings
from django.db import models
from django.db.models import Q
from django.utils import timezone

from workflows.models.plans import Step, Workflow


class Approval(models.Model):
    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="approvals")
    # The person who decided; null for an approval no person made (`basis`).
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, null=True, related_name="+")
    decision = models.CharField(max_length=16, choices=Decision.choices)
    comment = models.TextField(blank=True, default="")
    plan_hash = models.CharField(max_length=64)
    created_at = models.DateTimeField(default=timezone.now)
    # What approved it when no person did (docs/explanation/policies.md#approval-by-policy):
    # `policy:<team>:<@id,...>@<version>` for the team's Cedar set, sealed
    # with the rest; "" for a person's approval. Counts only while live
    # (`workflows.engine.bases`).
    basis = models.TextField(blank=True, default="", db_default="")
    # HMAC-SHA256 under the audit key `key_id` over what was decided
    # (`workflows.engine.binding.seal`): an approval without a valid one never counts.
    mac = models.CharField(max_length=64, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")
    # `{step key: digest}` of the previews the reviewer was shown, sealed with
    # the rest; null (none shown) in rows written without it.
    preview_digests = models.JSONField(default=dict, blank=True, null=True)
    # The plan revision decided on, sealed with the rest: an approval of an
    # earlier revision never counts, even for a plan edited back to the same hash.
    revision = models.PositiveIntegerField(default=1, db_default=1)

    class Meta:
        ordering = ["created_at", "id"]
        indexes = [models.Index(fields=["workflow", "created_at"], name="approval_workflow")]
        constraints = [
            # A person, or a basis: never both, never neither.
            models.CheckConstraint(
                condition=(Q(reviewer__isnull=False) & Q(basis="")) | (Q(reviewer__isnull=True) & ~Q(basis="")),
                name="approval_person_or_basis",
            )
        ]


class GateApproval(models.Model):
    """A reviewer's decision on a gate: sealed with the audit key over the
    plan, the gate's step and the digest of the results they were shown."""

    class Decision(models.TextChoices):
        APPROVE = "APPROVE"
        REJECT = "REJECT"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="gate_approvals")
    step = models.ForeignKey(Step, on_delete=models.CASCADE, related_name="gate_approvals")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16, choices=Decision.choices)
    comment = models.TextField(blank=True, default="")
    plan_hash = models.CharField(max_length=64)
    results_digest = models.CharField(max_length=64)
    # A typed gate's choice among its options and the input its schema asks
    # for (docs/explanation/review.md#typed-decisions); sealed with the rest.
    choice = models.CharField(max_length=200, blank=True, default="")
    input = models.JSONField(null=True, blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    mac = models.CharField(max_length=64, blank=True, default="")
    key_id = models.CharField(max_length=32, blank=True, default="")

    class Meta:
        ordering = ["created_at", "id"]
        constraints = [models.UniqueConstraint(fields=["step", "reviewer"], name="gate_decision_once")]


class ReviewNotice(models.Model):
    """A notice to a plan's reviewers: the first, that it awaits them (due
    at its submission); a reminder before its review deadline; the
    escalation once that passed. One row each, written with the plan, sent
    once by whichever cluster takes its row first
    (`operations.notifications.send_due`). Also the escalation of a plan
    whose own deadline passed, written by the escalation itself
    (`engine.expiry`)."""

    class Kind(models.TextChoices):
        NOTICE = "NOTICE"
        REMINDER = "REMINDER"
        ESCALATION = "ESCALATION"

    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="review_notices")
    kind = models.CharField(max_length=16, choices=Kind.choices)
    due_at = models.DateTimeField()
    # The review deadline it is about, and (an escalation) the group told;
    # from the plan's `review`, else from its actions' policies.
    deadline = models.DateTimeField()
    group = models.CharField(max_length=150, blank=True, default="")
    sent_at = models.DateTimeField(null=True, blank=True)
    # An escalation of a plan whose own deadline passed (`"on_expiry":
    # "escalate"`): due when it passed, about the deadline it was extended to.
    at_expiry = models.BooleanField(default=False, db_default=False)
    # What became of it: the number of people told, or why nobody was.
    outcome = models.CharField(max_length=200, blank=True, default="")

    class Meta:
        constraints = [models.UniqueConstraint(fields=["workflow", "kind", "due_at"], name="review_notice_once")]
        indexes = [
            models.Index(fields=["due_at"], condition=Q(sent_at__isnull=True), name="review_notice_due"),
            # The analytics count the notices sent since a time (docs/guides/analytics.md).
            models.Index(fields=["sent_at"], condition=Q(sent_at__isnull=False), name="review_notice_sent"),
        ]


class UsedReviewLink(models.Model):
    """A one-click review link that decided (`operations.links`): each
    link's nonce once, so a link decides at most once."""

    nonce = models.CharField(max_length=32, unique=True)
    workflow = models.ForeignKey(Workflow, on_delete=models.CASCADE, related_name="+")
    reviewer = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    decision = models.CharField(max_length=16)
    used_at = models.DateTimeField(default=timezone.now)
