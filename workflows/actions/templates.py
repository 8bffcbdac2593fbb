"""Request templates (docs/explanation/decisions.md#bound-decisions, exact previews): the request an action
will send, built from its args as submitted by the same code that later
sends it.

An action with an effect builds its request from its args with the helpers
here (`text`, `json_text`): a plain value becomes the text it is sent as, a
reference becomes a `Slot` that shows as its placeholder (`secret:NAME`,
`{{from:<ref>}}`) and is filled with its value, encoded for the place it
takes. Built from the args as submitted, the request is the template the
reviewer is shown (`shown`, with its `template_sha256`); built from the
resolved args, the same code gives the request as sent, so that what is
sent is the template with only its placeholders filled (`fill` says what
that is, for any values). A template never holds a secret's value, and no
hash is ever taken of a filled request.

A placeholder stands where a whole value goes: in a JSON body it replaces
the JSON value (unquoted, so a placeholder cannot be mistaken for a string
the plan wrote), in a URL or a header its text.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from workflows.actions.args import DECISION, FROM, is_decision, is_reference
from workflows.audit import secrets
from workflows.db import canonical_json, sha256_hex


@dataclass(frozen=True)
class Slot:
    """A reference in the args, at one place of a request: shown as its
    placeholder, filled with its value as `encode` writes it there."""

    reference: dict
    encode: Callable[[Any], str]

    @property
    def placeholder(self) -> str:
        if secrets.is_reference(self.reference):
            return f"secret:{self.reference[secrets.SECRET]}"
        if is_decision(self.reference):
            return f"{{{{decision:{self.reference[DECISION]}}}}}"
        return f"{{{{from:{self.reference[FROM]}}}}}"


# A text of a request: literal pieces and slots, in order.
Text = tuple[str | Slot, ...]


def _is_reference(value: Any) -> bool:
    return is_reference(value) or is_decision(value) or secrets.is_reference(value)


def text(value: Any, encode: Callable[[Any], str] = str) -> Text:
    """One value at one place of a request: its text, or a slot for a reference."""
    return (Slot(value, encode),) if _is_reference(value) else (encode(value),)


def compact_json(value: Any) -> str:
    """How a JSON body is sent: compact, keys sorted, UTF-8. Sorted, because
    the order an object's keys come back in depends on the database
    (PostgreSQL's jsonb keeps its own), and a template must not."""
    return canonical_json(value)


def _holds_reference(value: Any) -> bool:
    if _is_reference(value):
        return True
    if isinstance(value, dict):
        return any(_holds_reference(item) for item in value.values())
    if isinstance(value, list):
        return any(_holds_reference(item) for item in value)
    return False


def json_text(value: Any) -> Text:
    """A JSON body with a slot for each reference in it. A part without
    references is written as `compact_json` writes it, so a body built from
    resolved args is, byte for byte, its template filled."""
    if not _holds_reference(value):
        return (compact_json(value),)
    if _is_reference(value):
        return (Slot(value, compact_json),)
    parts: list[str | Slot] = []
    if isinstance(value, dict):
        parts.append("{")
        for number, (key, item) in enumerate(sorted(value.items())):
            parts.extend(([","] if number else []) + [compact_json(str(key)), ":", *json_text(item)])
        parts.append("}")
    else:
        parts.append("[")
        for number, item in enumerate(value):
            parts.extend(([","] if number else []) + list(json_text(item)))
        parts.append("]")
    return tuple(parts)


def _render(pieces: Text, value_of: Callable[[dict], Any] | None) -> str:
    """The text with each slot shown as its placeholder, or, with `value_of`
    (a reference's value), filled."""
    out = []
    for piece in pieces:
        if isinstance(piece, str):
            out.append(piece)
        elif value_of is None:
            out.append(piece.placeholder)
        else:
            out.append(piece.encode(value_of(piece.reference)))
    return "".join(out)


def _digest(shown: dict) -> str:
    return sha256_hex(canonical_json(shown))


class Request:
    """What an action sends; `shown()` is its template."""

    summary: str

    def _shown(self, value_of) -> dict:
        raise NotImplementedError

    def shown(self) -> dict:
        """The template as the preview shows it, with its `template_sha256`
        (SHA-256 of the canonical JSON of the rest)."""
        template = self._shown(None)
        return {**template, "template_sha256": _digest(template)}

    def fill(self, value_of: Callable[[dict], Any]) -> dict:
        """The template with each placeholder filled (`value_of`: a
        reference's value): what the request built from the resolved args
        sends. Never stored, never hashed."""
        return self._shown(value_of)

    def sent(self) -> dict:
        """The request built from resolved args, as it goes out."""
        return self._shown(_no_reference_left)


def _no_reference_left(reference: dict) -> Any:
    raise ValueError(f"a reference was left unresolved in the request: {secrets.shown(reference)}")


@dataclass(frozen=True)
class HttpRequest(Request):
    """An HTTP request: `body` the exact text sent (UTF-8), "" for none."""

    method: str
    url: Text
    headers: tuple[tuple[str, Text], ...] = ()
    body: Text = ()

    def _shown(self, value_of) -> dict:
        return {
            "method": self.method,
            "url": _render(self.url, value_of),
            "headers": {name: _render(value, value_of) for name, value in self.headers},
            "body": _render(self.body, value_of),
        }

    @property
    def summary(self) -> str:
        return f"{self.method} {_render(self.url, None)}"


@dataclass(frozen=True)
class MailMessage(Request):
    """A plain-text message. Its recipients are never references."""

    sender: str
    to: tuple[str, ...]
    cc: tuple[str, ...]
    subject: Text
    body: Text

    def _shown(self, value_of) -> dict:
        return {
            "from": self.sender,
            "to": list(self.to),
            "cc": list(self.cc),
            "subject": _render(self.subject, value_of),
            "body": _render(self.body, value_of),
        }

    @property
    def summary(self) -> str:
        return f"Send “{_render(self.subject, None)}” to {', '.join(self.to + self.cc)}"
