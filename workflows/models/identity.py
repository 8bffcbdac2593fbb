"""Who acts: teams, the accounts behind a provider's subjects, the persons
accounts belong to, agents' owners and API tokens."""

from django.conf import settings
from django.db import models
from django.utils import timezone

from workflows import teams


class TeamQuerySet(models.QuerySet):
    def visible_to(self, user):
        """The teams whose work `user` sees (every team for a global user)."""
        if teams.is_global(user):
            return self
        return self.filter(pk__in=teams.team_ids(user))


class Team(models.Model):
    """A group of people and agents that see and decide only their own work
    (docs/explanation/teams.md#teams). Rows that existed before teams belong to `default`."""

    DEFAULT = teams.DEFAULT

    name = models.SlugField(max_length=64, unique=True)
    members = models.ManyToManyField(settings.AUTH_USER_MODEL, related_name="teams", blank=True)
    created_at = models.DateTimeField(default=timezone.now)
    # How long the team's finished plans stay in the tables before
    # `manage.py archive` (without --older-than) moves them out; null: kept.
    retention_days = models.PositiveIntegerField(null=True, blank=True)

    objects = TeamQuerySet.as_manager()

    def __str__(self) -> str:
        return self.name


class ProviderIdentity(models.Model):
    """The account an identity provider's subject signs in as (docs/explanation/teams.md#teams):
    found by (issuer, subject), never by a name or an email address another
    account could share."""

    user = models.OneToOneField(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="provider_identity")
    issuer = models.CharField(max_length=255)
    subject = models.CharField(max_length=255)
    groups = models.JSONField(default=list, blank=True)  # the provider's groups at the last sign-in
    signed_in_at = models.DateTimeField(default=timezone.now)

    class Meta:
        constraints = [models.UniqueConstraint(fields=["issuer", "subject"], name="provider_identity_unique")]

    def __str__(self) -> str:
        return f"{self.subject} at {self.issuer}"


class AccountLink(models.Model):
    """Accounts of one person, grouped for four-eyes only
    (docs/approval-guarantees.md): a link never gives sign-in, roles or
    teams. An account with no row is a person of its own."""

    user = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="account_link"
    )
    person = models.UUIDField(db_index=True)
    via = models.CharField(max_length=32)  # "manual", "sso-email"
    linked_at = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.user} is person {self.person}"


class AgentOwner(models.Model):
    """The person who answers for an agent's account: its plans count as
    theirs for four-eyes, and their removal at the provider stops its
    tokens."""

    agent = models.OneToOneField(
        settings.AUTH_USER_MODEL, on_delete=models.CASCADE, primary_key=True, related_name="agent_owner"
    )
    owner = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.PROTECT, related_name="agents_owned")
    since = models.DateTimeField(default=timezone.now)

    def __str__(self) -> str:
        return f"{self.agent} owned by {self.owner}"


class ApiToken(models.Model):
    user = models.ForeignKey(settings.AUTH_USER_MODEL, on_delete=models.CASCADE, related_name="api_tokens")
    # The agent's team: the plans it submits with this token are that team's.
    team = models.ForeignKey(Team, on_delete=models.PROTECT, related_name="tokens", default=teams.default_team_id)
    name = models.CharField(max_length=100, blank=True, default="")
    prefix = models.CharField(max_length=12)
    token_hash = models.CharField(max_length=64, unique=True)
    created_at = models.DateTimeField(default=timezone.now)
    last_used_at = models.DateTimeField(null=True, blank=True)
    revoked_at = models.DateTimeField(null=True, blank=True)
    # Stopped (not revoked) while its agent's owner is signed out at the
    # provider; an operator re-enables it.
    suspended_at = models.DateTimeField(null=True, blank=True)

    def __str__(self) -> str:
        return f"{self.prefix}… ({self.user})"
