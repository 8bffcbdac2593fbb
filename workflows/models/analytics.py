"""How plans left review, one row each, for the analytics
(docs/guides/analytics.md): written in the transaction that moves a plan
out of PLANNED (`workflows.engine.review_outcomes`), so no path that ends a
review is missed and the numbers never need a scan of the plans or the
audit trail.

A plan can name several actions: `DecisionRecord` counts each ending once,
`DecisionAction` repeats it once per distinct action of the plan, for the
filter and the breakdown by action. Both carry the columns the analytics
filter and group on, led by the team and the time of the decision in
their indexes, whatever the planner's statistics say.
"""

from django.db import models

from workflows import teams


class Outcome(models.TextChoices):
    APPROVED = "approved"
    REJECTED = "rejected"
    EXPIRED = "expired"
    CANCELLED = "cancelled"


class DecisionQuerySet(models.QuerySet):
    def visible_to(self, user):
        """Their teams' endings alone: the analytics are about teams' work, so
        (unlike a plan) nothing is shown for having submitted it. Every team
        for a global user; through a token, its team (`teams.team_ids`)."""
        if teams.is_global(user):
            return self
        return self.filter(team_id__in=teams.team_ids(user))


class DecisionFacts(models.Model):
    team = models.ForeignKey("Team", on_delete=models.PROTECT, related_name="+", db_index=False)
    outcome = models.CharField(max_length=16, choices=Outcome.choices)
    # The person (`workflows.persons` key) whose decision ended the review
    # (the last approval a plan needed); "" when no person decided: an
    # expiry, a cancellation, an approval made by policy.
    reviewer_key = models.CharField(max_length=64, blank=True, default="")
    # Who the audit names for it (an account's name, or `system`).
    actor = models.CharField(max_length=150, blank=True, default="")
    decided_at = models.DateTimeField()
    # From entering review (the submission) to `decided_at`.
    seconds = models.FloatField()

    objects = DecisionQuerySet.as_manager()

    class Meta:
        abstract = True


class DecisionRecord(DecisionFacts):
    """One plan's review, ended: approved, rejected, expired or cancelled.
    The plan's id is kept without a key to it, so that archiving the plan
    (`manage.py archive`) leaves its numbers in place."""

    workflow_id = models.UUIDField(unique=True)
    entered_review_at = models.DateTimeField()
    revision = models.PositiveIntegerField(default=1)

    class Meta:
        indexes = [
            models.Index(fields=["team", "decided_at"], name="decision_team_decided"),
            models.Index(fields=["decided_at"], name="decision_decided"),
        ]


class DecisionAction(DecisionFacts):
    """The same ending once per distinct action of its plan."""

    record = models.ForeignKey(DecisionRecord, on_delete=models.CASCADE, related_name="actions", db_index=False)
    action = models.CharField(max_length=100)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["record", "action"], name="decision_action_once")]
        indexes = [
            models.Index(fields=["team", "action", "decided_at"], name="decision_action_team"),
            models.Index(fields=["action", "decided_at"], name="decision_action_decided"),
            models.Index(fields=["team", "decided_at"], name="decision_action_team_at"),
            models.Index(fields=["decided_at"], name="decision_action_at"),
        ]


__all__ = ["Outcome", "DecisionQuerySet", "DecisionRecord", "DecisionAction"]
