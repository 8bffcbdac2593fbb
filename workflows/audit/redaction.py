"""Keep secrets and full prompts out of rows, logs, pages and dead letters.

What people and agents submit is never rewritten: a credential in a plan's
args or in a comment or reason is refused (`credential_fields`,
`refuse_credentials`), and a plan passes secrets by reference instead
(`workflows.audit.secrets`). What other systems send back (results, error texts)
and what the engine writes to its logs is redacted where it enters
(`redact`, `redact_text`), together with every secret value the worker
resolved. Agent context is evidence, not input: it is redacted and its
prompts summarised.
"""

import logging
import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflows.audit import secrets
from workflows.db import sha256_hex
from workflows.errors import DomainError

REDACTED = "[REDACTED]"

# Keys whose values are credentials whatever they look like.
SECRET_KEY_PATTERN = re.compile(
    r"(passw(or)?d|passphrase|(^|[-_.])pass($|[-_.])|secret|token|api[-_]?key|apikey|authorization|"
    r"(^|[-_.])auth($|[-_.])|cookie|credential|private[-_]?key|session[-_]?id|signature|bearer)",
    re.IGNORECASE,
)
# Keys whose values are prompts or conversation transcripts.
PROMPT_KEY_PATTERN = re.compile(r"(prompt|messages|transcript|system_message|completion)", re.IGNORECASE)


def _random_looking(token: str) -> bool:
    """Long enough, and mixing letters with digits again and again, or cases
    inside the word, as keys and their encodings do and words don't:
    `basic troubleshooting` and `token expiration` are prose, `Bearer
    4f9a8b7c6d5e`, `Basic dXNlcjpwYXNz` are not."""
    if len(token) < 12:
        return False
    switches = sum(1 for a, b in zip(token, token[1:]) if a.isalnum() and b.isalnum() and a.isalpha() != b.isalpha())
    inner_caps = sum(1 for a, b in zip(token, token[1:]) if a.islower() and b.isupper())
    return sum(c.isalpha() for c in token) >= 2 and (switches >= 3 or inner_caps >= 2)


def _password_like(token: str) -> bool:
    token = token.rstrip(".,;:!?)")
    return len(token) >= 6 and any(c.isalpha() for c in token) and any(c.isdigit() for c in token)


@dataclass(frozen=True)
class CredentialPattern:
    kind: str
    regex: re.Pattern
    # Checks the match's last group: the regex alone would also match prose.
    looks_real: Callable[[str], bool] | None = None

    def matches(self, match: re.Match) -> bool:
        return self.looks_real is None or self.looks_real(match.group(match.lastindex or 0))


# Values that are credentials wherever they appear.
CREDENTIAL_PATTERNS = [
    CredentialPattern(
        "an authorization header's credential",
        re.compile(r"(?i)\b(bearer|basic|token)\s+([A-Za-z0-9._~+/=-]{8,})"),
        _random_looking,
    ),
    CredentialPattern("an API key (sk-...)", re.compile(r"\bsk-([A-Za-z0-9_-]{12,})"), _random_looking),
    CredentialPattern(
        "an AWS access key", re.compile(r"\b(AKIA|ASIA)([A-Z0-9]{16})\b"), lambda key: any(c.isdigit() for c in key)
    ),
    CredentialPattern("a GitHub token", re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b")),
    CredentialPattern("a Slack token", re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}")),
    CredentialPattern(
        "a private key", re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)")
    ),
    # `password=hunter2`, as in a query string or a configuration line.
    CredentialPattern(
        "a password or key assignment",
        re.compile(r"(?i)\b(api[-_]?key|secret|password|passwd|pwd|token)=([^\s&,;\"']{4,})"),
    ),
    # `password: hunter2`, but not `password: see the vault`.
    CredentialPattern(
        "a password or key",
        re.compile(r"(?i)\b(api[-_]?key|secret|password|passwd|token)\s*[:=]\s*([^\s&,;\"']+)"),
        _password_like,
    ),
]
# Every pattern above needs one of these: a string with none (most are) is
# left as it is after one search instead of eight.
_MAY_HOLD_SECRET = re.compile(
    r"bearer|basic|token|sk-|akia|asia|gh[pousr]_|xox|-----begin|api|secret|passw|pwd", re.IGNORECASE
)
PROMPT_LIMIT = 500


def _summary(text: str) -> str:
    digest = sha256_hex(text)[:12]
    return f"[REDACTED {len(text)} chars sha256:{digest}]"


def find_credential(text: str) -> str | None:
    """What kind of credential `text` holds, or None."""
    if not _MAY_HOLD_SECRET.search(text):
        return None
    for pattern in CREDENTIAL_PATTERNS:
        if any(pattern.matches(match) for match in pattern.regex.finditer(text)):
            return pattern.kind
    return None


def redact_text(text: str) -> str:
    text = secrets.scrub(text)
    if not _MAY_HOLD_SECRET.search(text):
        return text
    for pattern in CREDENTIAL_PATTERNS:
        text = pattern.regex.sub(lambda m, p=pattern: REDACTED if p.matches(m) else m.group(0), text)
    return text


def was_redacted(value: Any) -> bool:
    """Does this (part of a recorded result) hold what redaction put there?"""
    if isinstance(value, str):
        return "[REDACTED" in value
    if isinstance(value, dict):
        return any(was_redacted(item) for item in value.values())
    if isinstance(value, list):
        return any(was_redacted(item) for item in value)
    return False


def _secret_strings(value: Any) -> Any:
    """Under a secret-named key, strings are credentials; numbers are not."""
    if isinstance(value, str):
        return REDACTED if value else value
    if isinstance(value, dict):
        return {str(key): _secret_strings(item) for key, item in value.items()}
    if isinstance(value, list):
        return [_secret_strings(item) for item in value]
    return value


def redact(value: Any, *, prompts: bool = False) -> Any:
    """Return a copy of a JSON-like value with secrets removed.

    With `prompts=True` (agent context), long strings are replaced by a
    length and digest: a prompt is evidence of intent, not something to keep.
    """
    if isinstance(value, dict):
        out = {}
        for key, item in value.items():
            key_text = str(key)
            if SECRET_KEY_PATTERN.search(key_text):
                out[key_text] = _secret_strings(item)
            elif PROMPT_KEY_PATTERN.search(key_text) and item not in (None, "", [], {}):
                out[key_text] = _summary(str(item))
            else:
                out[key_text] = redact(item, prompts=prompts)
        return out
    if isinstance(value, (list, tuple)):
        return [redact(item, prompts=prompts) for item in value]
    if isinstance(value, str):
        if prompts and len(value) > PROMPT_LIMIT:
            return _summary(value)
        return redact_text(value)
    return value


# --- refusing what people and agents submit -----------------------------------

PASS_BY_REFERENCE = 'Pass it as {"$secret": "NAME"}, a name the secrets policy (SECRETS_POLICY) allows here.'


def _is_reference(value: Any) -> bool:
    """A `$from`, or anything meant as a `$secret` (secrets.check refuses the malformed)."""
    return isinstance(value, dict) and (secrets.SECRET in value or set(value) == {"$from"})


def credential_fields(value: Any, path: str, *, secret_key: str | None = None) -> dict[str, str]:
    """Field errors, keyed by path, for every credential in a plan's args:
    a credential-looking string anywhere, or any string under a secret-named
    key (`password`, `api_key`, ...). References are not credentials."""
    errors: dict[str, str] = {}
    if _is_reference(value):
        return errors
    if isinstance(value, dict):
        for key, item in value.items():
            where = f"{path}.{key}"
            kind = find_credential(str(key))
            if kind:
                errors[where] = f"The key looks like a credential ({kind}). {PASS_BY_REFERENCE}"
                continue
            named = secret_key or (str(key) if SECRET_KEY_PATTERN.search(str(key)) else None)
            errors.update(credential_fields(item, where, secret_key=named))
    elif isinstance(value, list):
        for index, item in enumerate(value):
            errors.update(credential_fields(item, f"{path}.{index}", secret_key=secret_key))
    elif isinstance(value, str) and value:
        if secret_key:
            errors[path] = f"A value under {secret_key!r} is a secret. {PASS_BY_REFERENCE}"
        elif kind := find_credential(value):
            errors[path] = f"This looks like a credential ({kind}). {PASS_BY_REFERENCE}"
    return errors


class CredentialRefused(DomainError):
    """A free-text field holds a credential: refused, nothing changed."""

    code = "invalid"

    def __init__(self, fields: dict[str, str]):
        names = ", ".join(sorted(fields))
        super().__init__(
            f"Refused: {names} looks like it holds a credential. Remove it; "
            f"credentials never belong in comments, reasons or evidence."
        )
        self.fields = fields


def refuse_credentials(**texts: str | None) -> None:
    """Raise CredentialRefused naming each field whose text holds a credential."""
    fields = {}
    for name, text in texts.items():
        kind = find_credential(text) if text else None
        if kind:
            fields[name] = f"This looks like a credential ({kind}): remove it."
    if fields:
        raise CredentialRefused(fields)


class RedactingFilter(logging.Filter):
    """Scrub credentials from every log record before any handler sees it,
    the traceback of a logged exception included."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record still must not leak its args
            message = str(record.msg)
        record.msg = redact_text(message)
        record.args = None
        if record.exc_info and not record.exc_text:
            record.exc_text = redact_text(logging.Formatter().formatException(record.exc_info))
        return True
