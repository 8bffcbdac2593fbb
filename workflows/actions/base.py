"""The action interface: what an action is, what it returns, how it fails."""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, ClassVar

from pydantic import BaseModel

from workflows.actions.args import AnyArgs
from workflows.actions.templates import Request
from workflows.audit import secrets
from workflows.db import canonical_json, sha256_hex


@dataclass(frozen=True)
class Preview:
    """A read-only look at what an effect would do, for the reviewer: a one
    line `summary` and the `details` behind it (JSON values only), and, for
    an action that builds its request (`Action.request`), that request's
    template (docs/explanation/decisions.md#bound-decisions), which the engine adds."""

    summary: str
    details: dict[str, Any] = field(default_factory=dict)
    request: dict[str, Any] | None = None

    def as_json(self) -> dict[str, Any]:
        # Without a request, the JSON (and so the digest) is what it was
        # before requests were added: approvals stored then stay valid.
        shown = {"summary": self.summary, "details": self.details}
        return shown if self.request is None else {**shown, "request": self.request}

    @property
    def digest(self) -> str:
        """SHA-256 of the canonical JSON: what an approval binds."""
        return sha256_hex(canonical_json(self.as_json()))


@dataclass
class Outcome:
    result: dict[str, Any]
    external_ref: str = ""


@dataclass
class ActionError(Exception):
    """A classified failure. `outcome_unknown` means the request may have
    taken effect (sent, but no answer): reconcile before any retry."""

    failure_class: str
    message: str
    retry_after: float | None = None
    outcome_unknown: bool = False
    detail: dict[str, Any] = field(default_factory=dict)

    def __str__(self) -> str:
        return f"{self.failure_class}: {self.message}"


class Action:
    name: ClassVar[str]
    # The arguments, as a pydantic model (docs/explanation/actions.md#actions): usually an
    # `ArgsModel`, strict and closed. They are checked at submission, and
    # perform() receives the raw args as submitted, references resolved.
    Args: ClassVar[type[BaseModel]] = AnyArgs
    # Repeating perform() with the same operation key has no second effect
    # (the default answer of `is_idempotent(args)`, which the engine asks).
    idempotent: ClassVar[bool] = False
    # The effect destroys something that cannot be recreated.
    destructive: ClassVar[bool] = False
    # lookup() can tell whether an operation key already took effect.
    can_lookup: ClassVar[bool] = False
    # Name of the action that undoes this one, or None when irreversible.
    compensation: ClassVar[str | None] = None
    # perform() completes inside the worker's own process: nothing it starts
    # can still land after that process dies. With `idempotent`, such steps
    # share their checkpoint commits (execution.run_batch).
    in_process: ClassVar[bool] = False
    # The preview is taken again just before the effect; if it differs from
    # the one approved, the step is BLOCKED (POLICY_FAILED) for a fresh approval.
    preview_binding: ClassVar[bool] = False
    # No approval until the preview exists (409 `preview_pending`). Implied
    # for an action that builds its request (`waits_for_preview`).
    preview_required: ClassVar[bool] = False

    def target_url(self, args: dict[str, Any]) -> Any:
        """The URL this action sends its args to, for the `hosts` of
        SECRETS_POLICY; None when it calls none. By default its `url` argument."""
        return args.get("url")

    def target_hosts(self, args: dict[str, Any]) -> list[str | None] | None:
        """The hosts this action sends its args to, each of which SECRETS_POLICY's
        `hosts` must list for a secret to go with them (None for one that
        cannot be read); None when it sends them nowhere. By default the
        host of `target_url`."""
        url = self.target_url(args)
        return None if url is None else [secrets.host_of(url)]

    def perform(self, args: dict[str, Any], operation_key: str) -> Outcome:
        raise NotImplementedError

    def preview(self, args: dict[str, Any]) -> Preview | None:
        """A read-only look at what perform(args) would do, for the reviewer;
        None when the action offers none. Called by a worker, never in a web
        request. `args` are as submitted: a `$secret` reference stays a
        reference (a preview never sees a secret's value) and never holds a
        `$from` (such a step's preview, before it runs, is its request's
        template alone, or none). Failures are
        `ActionError`s, as in perform(); nothing here may change anything."""
        return None

    @property
    def has_preview(self) -> bool:
        return type(self).preview is not Action.preview or self.has_request

    def request(self, args: dict[str, Any]) -> Request | None:
        """The request perform(args) sends (`workflows.actions.templates`),
        built by the code perform() sends it with; None when the action
        shows none. From the args as submitted, each reference is a
        placeholder: the template the reviewer approves, which the engine
        builds again before the effect and refuses to send when it changed.
        From resolved args, it is what perform() sends. No remote read,
        nothing changed; a bad argument is an `ActionError`."""
        return None

    @property
    def has_request(self) -> bool:
        return type(self).request is not Action.request

    @property
    def waits_for_preview(self) -> bool:
        """Whether no approval may be recorded before the preview exists: the
        action requires it (`preview_required`), or the preview carries the
        request (`request`), which only an approval of it lets the worker send."""
        return self.preview_required or self.has_request

    def lookup(self, operation_key: str) -> Outcome | None:
        raise NotImplementedError(f"{self.name} cannot look up past operations")

    def verify(self, outcome: Outcome) -> bool:
        return True

    def compensation_args(self, args: dict[str, Any], result: dict[str, Any]) -> dict[str, Any]:
        return {}

    def is_idempotent(self, args: dict[str, Any]) -> bool:
        """Whether repeating perform() with these args and the same operation
        key has no second effect. Asked per step, never assumed: an action
        whose receiver is named in its args (http.post) knows only from them."""
        return self.idempotent

    def is_safe_to_repeat(self, args: dict[str, Any]) -> bool:
        return self.is_idempotent(args) or self.can_lookup

    @property
    def irreversible(self) -> bool:
        return self.compensation is None
