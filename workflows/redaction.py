"""Keep secrets and full prompts out of rows, logs, pages and dead letters.

Redaction happens where untrusted data enters (plan submission, action
errors, traces), so nothing downstream ever holds the raw value.
"""

import hashlib
import logging
import re
from typing import Any

REDACTED = "[REDACTED]"

# Keys whose values are credentials whatever they look like.
SECRET_KEY_PATTERN = re.compile(
    r"(passw(or)?d|passphrase|(^|[-_.])pass($|[-_.])|secret|token|api[-_]?key|apikey|authorization|"
    r"(^|[-_.])auth($|[-_.])|cookie|credential|private[-_]?key|session[-_]?id|signature|bearer)",
    re.IGNORECASE,
)
# Keys whose values are prompts or conversation transcripts.
PROMPT_KEY_PATTERN = re.compile(r"(prompt|messages|transcript|system_message|completion)", re.IGNORECASE)
# Values that are credentials wherever they appear.
SECRET_VALUE_PATTERNS = [
    re.compile(r"(?i)\b(bearer|basic|token)\s+[A-Za-z0-9._~+/=-]{8,}"),
    re.compile(r"\bsk-[A-Za-z0-9_-]{12,}"),
    re.compile(r"\b(AKIA|ASIA)[A-Z0-9]{16}\b"),
    re.compile(r"\bgh[pousr]_[A-Za-z0-9]{20,}\b"),
    re.compile(r"\bxox[abpr]-[A-Za-z0-9-]{10,}"),
    re.compile(r"-----BEGIN [A-Z ]*PRIVATE KEY-----[\s\S]*?(-----END [A-Z ]*PRIVATE KEY-----|$)"),
    re.compile(r"(?i)\b(api[-_]?key|secret|password|passwd|token)\s*[=:]\s*[^\s&,;\"']{4,}"),
]
# Every pattern above needs one of these: a string with none (most are) is
# left as it is after one search instead of seven substitutions.
_MAY_HOLD_SECRET = re.compile(r"bearer|basic|token|sk-|akia|asia|gh[pousr]_|xox|-----begin|api|secret|passw",
                              re.IGNORECASE)
PROMPT_LIMIT = 500


def _summary(text: str) -> str:
    digest = hashlib.sha256(text.encode()).hexdigest()[:12]
    return f"[REDACTED {len(text)} chars sha256:{digest}]"


def redact_text(text: str) -> str:
    if not _MAY_HOLD_SECRET.search(text):
        return text
    for pattern in SECRET_VALUE_PATTERNS:
        text = pattern.sub(REDACTED, text)
    return text


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
                out[key_text] = REDACTED
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


class RedactingFilter(logging.Filter):
    """Scrub credentials from every log record before any handler sees it."""

    def filter(self, record: logging.LogRecord) -> bool:
        try:
            message = record.getMessage()
        except Exception:  # a malformed record still must not leak its args
            message = str(record.msg)
        record.msg = redact_text(message)
        record.args = None
        return True
