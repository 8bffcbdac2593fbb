"""The one reason validator: every operation that asks "why" (resolving,
replaying, discarding, cancelling, compensating, changing a policy,
replaying a delivery) takes its reason through `clean_reason`, so the API,
the console and the commands refuse the same reasons with the same words.
A reason is kept as written (only the blank around it is dropped): one
that is too long is refused, never cut."""

from workflows.audit.redaction import refuse_credentials
from workflows.errors import DomainError

MAX_LENGTH = 2000
REQUIRED = "A reason is required."
TOO_LONG = f"A reason is at most {MAX_LENGTH} characters."


class ReasonInvalid(DomainError):
    code = "invalid"


def clean_reason(text: str | None, *, required: bool = True) -> str:
    """The reason to record, or `ReasonInvalid` (blank when one is required,
    over MAX_LENGTH, or holding a credential: `CredentialRefused`)."""
    reason = (text or "").strip()
    if required and not reason:
        raise ReasonInvalid(REQUIRED, fields={"reason": REQUIRED})
    if len(reason) > MAX_LENGTH:
        raise ReasonInvalid(TOO_LONG, fields={"reason": TOO_LONG})
    refuse_credentials(reason=reason)
    return reason
