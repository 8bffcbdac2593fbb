"""Checking a proposed policy set (docs/explanation/policies.md#versions).

A set is accepted only when Cedar parses it, validates it against the
published schema (`workflows.policy.schema`), every policy carries an `@id`
(unique in the set) and its annotations are well formed, and, for the global
set, every policy is a `forbid`. A refusal carries Cedar's own message and
the line it is about: cedarpy's messages name no position, so the text is cut
into its policies here (at each `;` outside strings and comments) and the
line is found by parsing the failing policy line by line.

Bounds come first, before Cedar sees the text: at most `MAX_TEXT_CHARS`
characters and `MAX_POLICIES` policies, so parsing and validation stay
within a fraction of a second and a few megabytes.
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field

import cedarpy

from workflows.errors import DomainError
from workflows.policy import schema

MAX_TEXT_CHARS = 200_000
MAX_POLICIES = 1_000
MAX_APPROVALS = 10
ANNOTATIONS = {"id", "approvals", "reviewer_group", "allow_destructive"}
ID = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.:-]{0,99}$")


class PolicyTextInvalid(DomainError):
    """A refused policy set: Cedar's message (or ours) and its line."""

    code = "invalid"

    def __init__(self, message: str, line: int | None = None):
        where = f"line {line}: " if line is not None else ""
        super().__init__(
            f"{where}{message}", fields={"text": f"{where}{message}"}, details={"line": line} if line else None
        )
        self.line = line


@dataclass(frozen=True)
class Policy:
    """One policy of a checked set: its `@id`, effect, annotations, first line
    and Cedar's JSON form (EST)."""

    id: str
    effect: str
    annotations: dict[str, str]
    line: int
    est: dict = field(repr=False, compare=False)

    @property
    def approvals(self) -> int | None:
        value = self.annotations.get("approvals")
        return int(value) if value is not None else None

    @property
    def reviewer_group(self) -> str | None:
        return self.annotations.get("reviewer_group") or None

    @property
    def allows_destructive(self) -> bool:
        return self.annotations.get("allow_destructive") == "true"

    @property
    def asks_people(self) -> bool:
        """Whether it raises what humans must give: then a step it permits
        is never approved by policy."""
        return self.approvals is not None or self.reviewer_group is not None


def chunks(text: str) -> list[tuple[int, str]]:
    """The policies of `text` as (first line, text up to and including its
    `;`), ignoring `;` inside strings and `//` comments; trailing blanks and
    comments are no policy."""
    found, start, i, n = [], 0, 0, len(text)
    while i < n:
        char = text[i]
        if char == '"':
            i += 1
            while i < n and text[i] != '"':
                i += 2 if text[i] == "\\" else 1
        elif text.startswith("//", i):
            end = text.find("\n", i)
            i = n if end < 0 else end
            continue
        elif char == ";":
            found.append((start, text[start : i + 1]))
            start = i + 1
        i += 1
    rest = text[start:]
    if _content_offset(rest) is not None:
        found.append((start, rest))
    return [(text.count("\n", 0, offset + _content_offset(chunk)) + 1, chunk) for offset, chunk in found]


def _content_offset(chunk: str) -> int | None:
    """Where the first character that is neither blank nor comment is."""
    i = 0
    while i < len(chunk):
        if chunk[i].isspace():
            i += 1
        elif chunk.startswith("//", i):
            end = chunk.find("\n", i)
            if end < 0:
                return None
            i = end + 1
        else:
            return i
    return None


def _parse_error_line(first_line: int, chunk: str, message: str) -> int:
    """The line of a policy at which Cedar's parse error appears: the first
    line whose prefix of the policy fails with the same message."""
    lines = chunk.split("\n")
    for count in range(1, len(lines) + 1):
        try:
            cedarpy.PolicySet.from_str("\n".join(lines[:count]))
        except ValueError as exc:
            if str(exc) == message:
                return first_line + count - 1
    return first_line


def check(text: str, *, global_set: bool = False) -> list[Policy]:
    """The policies of a proposed set, or PolicyTextInvalid naming the line."""
    if not isinstance(text, str) or not text.strip():
        raise PolicyTextInvalid("A policy set needs at least one policy.")
    if len(text) > MAX_TEXT_CHARS:
        raise PolicyTextInvalid(f"A policy set may have at most {MAX_TEXT_CHARS} characters.")
    if "\x00" in text:
        raise PolicyTextInvalid("A policy set is text: NUL characters are refused.")
    parts = chunks(text)
    if not parts:
        raise PolicyTextInvalid("A policy set needs at least one policy.")
    if len(parts) > MAX_POLICIES:
        raise PolicyTextInvalid(f"A policy set may have at most {MAX_POLICIES} policies; this one has {len(parts)}.")
    for line, chunk in parts:
        try:
            cedarpy.PolicySet.from_str(chunk)
        except ValueError as exc:
            raise PolicyTextInvalid(str(exc), _parse_error_line_in(line, chunk, str(exc))) from None
    try:
        est = json.loads(cedarpy.policies_to_json_str(text))
    except ValueError as exc:
        raise PolicyTextInvalid(str(exc)) from None
    if est.get("templates"):
        raise PolicyTextInvalid("Templates (policies with ?principal or ?resource) are not supported.")
    bodies = est["staticPolicies"]
    if len(bodies) != len(parts):
        raise PolicyTextInvalid("Write one policy per `;`-terminated statement.")
    policies = [_policy(bodies[f"policy{index}"], line, global_set) for index, (line, _) in enumerate(parts)]
    seen: dict[str, int] = {}
    for policy in policies:
        if policy.id in seen:
            raise PolicyTextInvalid(
                f"@id({policy.id!r}) is already the id of the policy at line {seen[policy.id]}.", policy.line
            )
        seen[policy.id] = policy.line
    result = cedarpy.validate_policies(text, schema.text())
    if not result.validation_passed:
        error = result.errors[0]
        index = int(error.policy_id.removeprefix("policy")) if error.policy_id.startswith("policy") else None
        line = policies[index].line if index is not None and index < len(policies) else None
        message = error.error
        if index is not None and index < len(policies):
            message = message.replace(f"`{error.policy_id}`", f"`{policies[index].id}`")
        raise PolicyTextInvalid(message, line)
    return policies


def _parse_error_line_in(line: int, chunk: str, message: str) -> int:
    offset = _content_offset(chunk) or 0
    return _parse_error_line(line, chunk[offset:], message)


def _policy(body: dict, line: int, global_set: bool) -> Policy:
    annotations = body.get("annotations") or {}
    policy_id = annotations.get("id")
    if not policy_id:
        raise PolicyTextInvalid('Every policy needs an @id("...") annotation.', line)
    if not ID.match(policy_id):
        raise PolicyTextInvalid(
            "An @id is 1 to 100 letters, digits, '.', '_', ':' or '-', starting with a letter or digit.", line
        )
    unknown = sorted(set(annotations) - ANNOTATIONS)
    if unknown:
        raise PolicyTextInvalid(f"Unknown annotation @{unknown[0]}: use @{', @'.join(sorted(ANNOTATIONS))}.", line)
    approvals = annotations.get("approvals")
    if approvals is not None and not (approvals.isdigit() and 1 <= int(approvals) <= MAX_APPROVALS):
        raise PolicyTextInvalid(f'@approvals is a whole number from 1 to {MAX_APPROVALS}, as in @approvals("2").', line)
    if annotations.get("allow_destructive") not in (None, "true", "false"):
        raise PolicyTextInvalid('@allow_destructive is "true" or "false".', line)
    if "reviewer_group" in annotations and not annotations["reviewer_group"]:
        raise PolicyTextInvalid("@reviewer_group names a group.", line)
    if global_set and body["effect"] != "forbid":
        raise PolicyTextInvalid(
            f"The global policy set may only forbid: {policy_id!r} is a permit, which would allow what a team's "
            "set does not.",
            line,
        )
    return Policy(id=policy_id, effect=body["effect"], annotations=dict(annotations), line=line, est=body)
