"""A reviewer away, and who looks after their queue meanwhile
(docs/explanation/review.md#delegation)."""

from django.conf import settings
from django.db import models
from django.db.models import F, Q
from django.utils import timezone


class DelegationQuerySet(models.QuerySet):
    def open(self):
        """Not ended by anyone yet: the one a delegator may have (at most one)."""
        return self.filter(ended_at__isnull=True)

    def active(self, now=None):
        """In force now: open, and `until` not reached (reads never wait for
        the worker to close a lapsed one)."""
        return self.filter(ended_at__isnull=True, until__gt=now or timezone.now())

    def lapsed(self, now=None):
        """Open still, though `until` passed: over, waiting to be closed (audited)."""
        return self.filter(ended_at__isnull=True, until__lte=now or timezone.now())


class Delegation(models.Model):
    """`delegator` is away until `until`: the notices, reminders,
    escalations and assignments meant for them go to `delegate`, who decides
    with their own eligibility (`operations.delegation`)."""

    delegator = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="delegations")
    delegate = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="+")
    note = models.TextField(blank=True, default="")
    since = models.DateTimeField(default=timezone.now)
    until = models.DateTimeField()
    # When it ended: ended by its delegator, replaced, or closed once `until`
    # passed (then `until` itself). Null while open.
    ended_at = models.DateTimeField(null=True, blank=True)

    objects = DelegationQuerySet.as_manager()

    class Meta:
        constraints = [
            # One open delegation a delegator: a second start ends the first
            # in its transaction, and a race of two starts loses here.
            models.UniqueConstraint(
                fields=["delegator"], condition=Q(ended_at__isnull=True), name="delegation_one_open"
            ),
            models.CheckConstraint(condition=Q(until__gt=F("since")), name="delegation_ends_after_it_starts"),
            models.CheckConstraint(condition=~Q(delegate=F("delegator")), name="delegation_not_to_oneself"),
        ]
        indexes = [
            models.Index(fields=["delegate"], condition=Q(ended_at__isnull=True), name="delegation_open_to"),
            models.Index(fields=["until"], condition=Q(ended_at__isnull=True), name="delegation_open_until"),
        ]
