"""Who is behind the events a request writes, beyond the actor's username:
the identity provider's subject and issuer for an SSO user, the token for an
agent, and the client address (docs/explanation/teams.md#teams).

The web layer sets it once per request (workflows.web.identity, and the
API's token authentication); the journal reads it when it appends. No
request object reaches an operation; a process with no request (a worker, a
management command) has none, and its events carry none.
"""

from __future__ import annotations

from contextvars import ContextVar
from dataclasses import dataclass, replace


@dataclass(frozen=True)
class Requester:
    username: str = ""  # the events of this actor carry the fields below
    subject: str = ""
    issuer: str = ""
    token: str = ""  # the API token's public prefix (its id: `manage.py issue_token` shows it)
    client_address: str = ""

    def fields(self) -> dict[str, str]:
        """The non-empty identity fields, as the audit event stores them."""
        return {
            name: value
            for name, value in (
                ("subject", self.subject),
                ("issuer", self.issuer),
                ("token_id", self.token),
                ("client_address", self.client_address),
            )
            if value
        }


NOBODY = Requester()
_current: ContextVar[Requester] = ContextVar("durableconsole_requester", default=NOBODY)


def current() -> Requester:
    return _current.get()


def begin(requester: Requester):
    """Set for the rest of this request; returns what `end` needs."""
    return _current.set(requester)


def end(token) -> None:
    _current.reset(token)


def update(**changes) -> None:
    """Refine the current requester (the API learns its user only when it
    checks the bearer token)."""
    _current.set(replace(_current.get(), **changes))


def fields_for(actor_name: str) -> dict[str, str]:
    """The identity fields for an event by `actor_name`: only the
    requester's own events carry them (not the system's, written in the same
    request)."""
    requester = _current.get()
    if not requester.username or requester.username != actor_name:
        return {}
    return requester.fields()
