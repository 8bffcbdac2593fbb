"""Sessions and tokens follow the person (docs/explanation/decisions.md#bound-decisions).

A person removed at the identity provider (its back-channel logout, or a
silent renewal it refuses) keeps no working session or token here: the
sessions of their SSO account end, and the tokens of the agents their
accounts own are suspended until an operator re-enables them (`manage.py
agent enable NAME`). A break-glass grant (`manage.py breakglass`) lets one
local account sign in with its password for a few hours while local sign-in
is off; the grant is the audit event itself, so it cannot be made or
stretched without leaving a trace.
"""

from __future__ import annotations

from datetime import datetime, timedelta

from django.contrib.auth import get_user_model
from django.contrib.sessions.models import Session
from django.db import transaction
from django.utils import timezone

from workflows import persons
from workflows.audit import journal
from workflows.errors import DomainError
from workflows.models import AgentOwner, ApiToken, AuditEvent, ProviderIdentity

BREAKGLASS = "user.breakglass"
MAX_BREAKGLASS_HOURS = 24
# Where an SSO sign-in leaves the provider's identity in the session
# (workflows.web.sso writes it, workflows.web.identity reads it).
SSO_SESSION_KEY = "durableconsole.sso"
AUTH_USER = "_auth_user_id"


class BreakglassInvalid(DomainError):
    code = "invalid"


def _live_sessions():
    """(key, data) of each stored session not yet expired. Stored sessions
    are signed blobs, so each is read: a provider's logout is rare."""
    for session in Session.objects.filter(expire_date__gt=timezone.now()).iterator():
        yield session.pk, session.get_decoded()


def _end(keys: list[str]) -> int:
    Session.objects.filter(pk__in=keys).delete()
    return len(keys)


def signed_out_at_provider(*, issuer: str, subject: str = "", sid: str = "", via: str) -> dict | None:
    """End the sessions of the provider's subject (with `sid` only: of that
    provider session) and suspend the tokens of the agents their person
    owns. None when the provider names nobody known here."""
    identity = (
        ProviderIdentity.objects.select_related("user").filter(issuer=issuer, subject=subject).first()
        if subject
        else None
    )
    if subject and identity is None:
        return None
    ended, user_ids = [], set()
    for key, data in _live_sessions():
        sso = data.get(SSO_SESSION_KEY) if isinstance(data.get(SSO_SESSION_KEY), dict) else {}
        if subject:
            if data.get(AUTH_USER) == str(identity.user_id):
                ended.append(key)
        elif sso.get("iss") == issuer and sso.get("sid") == sid and AUTH_USER in data:
            ended.append(key)
            user_ids.add(int(data[AUTH_USER]))
    if identity is None:
        identity = ProviderIdentity.objects.select_related("user").filter(issuer=issuer, user_id__in=user_ids).first()
        if identity is None:
            return None
    return _stop_agents(identity.user, via=via, sessions=_end(ended), sid=sid)


def _stop_agents(user, *, via: str, sessions: int, sid: str = "") -> dict:
    agents = AgentOwner.objects.filter(owner_id__in=persons.accounts_of(user)).values("agent_id")
    with transaction.atomic():
        suspended = ApiToken.objects.filter(
            user_id__in=agents, revoked_at__isnull=True, suspended_at__isnull=True
        ).update(suspended_at=timezone.now())
        outcome = {
            "via": via,
            "sessions_ended": sessions,
            "tokens_suspended": suspended,
            **({"sid": sid} if sid else {}),
        }
        journal.append(actor=user, verb="user.signed_out_at_provider", obj_type="user", obj_id=user.pk, data=outcome)
    return outcome


def refused_at_renewal(user, *, error: str) -> dict:
    """The provider refused to renew this account's session silently: the
    person is out here too, in every session and in their agents' tokens."""
    sessions = _end([key for key, data in _live_sessions() if data.get(AUTH_USER) == str(user.pk)])
    return _stop_agents(user, via=f"silent-renewal:{error[:40]}", sessions=sessions)


def enable_agent(agent, *, by) -> int:
    """Re-enable an agent's suspended tokens; how many."""
    with transaction.atomic():
        count = ApiToken.objects.filter(user=agent, revoked_at__isnull=True, suspended_at__isnull=False).update(
            suspended_at=None
        )
        if count:
            journal.append(
                actor=by,
                verb="agent.enabled",
                obj_type="user",
                obj_id=agent.pk,
                data={"agent": agent.get_username(), "tokens": count},
            )
    return count


# --- break-glass -----------------------------------------------------------------------


def grant_breakglass(user, *, hours: float, by) -> datetime:
    """Let this local account sign in with its password until now + hours
    (0 ends a grant early)."""
    if not 0 <= hours <= MAX_BREAKGLASS_HOURS:
        raise BreakglassInvalid(f"Break-glass lasts from 0 to {MAX_BREAKGLASS_HOURS} hours.")
    if ProviderIdentity.objects.filter(user=user).exists() or not user.has_usable_password():
        raise BreakglassInvalid(f"{user.get_username()} is not a local account with a password.")
    if not user.is_active:
        raise BreakglassInvalid(f"{user.get_username()} is deactivated.")
    until = timezone.now() + timedelta(hours=hours)
    with transaction.atomic():
        journal.append(
            actor=by,
            verb=BREAKGLASS,
            obj_type="user",
            obj_id=user.pk,
            data={"username": user.get_username(), "until": until.isoformat(), "hours": hours},
        )
    return until


def breakglass_until(username: str) -> datetime | None:
    """The end of this account's current break-glass grant, if one runs now."""
    user = get_user_model().objects.filter(username=username, is_active=True).first()
    if user is None:
        return None
    event = (
        AuditEvent.objects.filter(verb=BREAKGLASS, object_type="user", object_id=str(user.pk)).order_by("-id").first()
    )
    if event is None:
        return None
    until = datetime.fromisoformat(event.data["until"])
    return until if until > timezone.now() else None
