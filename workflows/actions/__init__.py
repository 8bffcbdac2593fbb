"""Actions: the effects a plan may ask for, behind one small interface.

To add an action, subclass `Action`, set its flags, implement `perform`
(and `lookup` if the remote system can answer "did operation K happen?"),
and decorate the class with `@register`. The engine never calls a remote
system except through this interface.
"""

from __future__ import annotations

import math
import threading
from dataclasses import dataclass, field
from typing import Any, ClassVar

import requests
from django.conf import settings

from workflows.audit import secrets
from workflows.audit.redaction import redact_text
from workflows.states import FailureClass

FROM = "$from"


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
    # Repeating perform() with the same operation key has no second effect
    # (the default answer of `is_idempotent(args)`, which the engine asks).
    idempotent: ClassVar[bool] = False
    # The effect destroys something that cannot be recreated.
    destructive: ClassVar[bool] = False
    # lookup() can tell whether an operation key already took effect.
    can_lookup: ClassVar[bool] = False
    # Name of the action that undoes this one, or None when irreversible.
    compensation: ClassVar[str | None] = None
    required_args: ClassVar[tuple[str, ...]] = ()
    # perform() completes inside the worker's own process: nothing it starts
    # can still land after that process dies. With `idempotent`, such steps
    # share their checkpoint commits (execution.run_batch).
    in_process: ClassVar[bool] = False

    def validate(self, args: dict[str, Any]) -> dict[str, str]:
        """Field errors of the plan's args, before anything is stored."""
        errors = {}
        for name in self.required_args:
            value = args.get(name)
            if value is None or (isinstance(value, str) and not value.strip()):
                errors[name] = "This field is required."
            elif not isinstance(value, (str, int)) and not is_reference(value) and not secrets.is_reference(value):
                errors[name] = "Must be a string or a {\"$from\": ...} reference."
        return errors

    def target_url(self, args: dict[str, Any]) -> Any:
        """The URL this action sends its args to, for the `hosts` of
        SECRETS_POLICY; None when it calls none. By default its `url` argument."""
        return args.get("url")

    def perform(self, args: dict[str, Any], operation_key: str) -> Outcome:
        raise NotImplementedError

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


_registry: dict[str, Action] = {}


def register(cls: type[Action]) -> type[Action]:
    _registry[cls.name] = cls()
    return cls


def get(name: str) -> Action:
    try:
        return _registry[name]
    except KeyError:
        raise KeyError(f"unknown action {name!r}") from None


def find(name: str) -> Action | None:
    """The action, or None when none of that name is installed (a plan
    recorded before an action was removed)."""
    return _registry.get(name)


def names() -> list[str]:
    return sorted(_registry)


def is_reference(value: Any) -> bool:
    return isinstance(value, dict) and set(value) == {FROM} and isinstance(value[FROM], str)


# --- HTTP plumbing shared by actions that call other systems -------------

_local = threading.local()


def http_session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = requests.Session()
    return session


def _retry_after(response: requests.Response) -> float | None:
    """The server's wait in seconds, read defensively: it may send `inf`,
    `nan`, `-5` or 10**12. A wait is never negative and at most a year: past
    any plan's deadline, so such a wait ends the retries (`retry` never
    schedules one past the deadline), where an unbounded one would overflow
    the datetime of the next attempt. `nan` and unreadable values count as
    no header."""
    longest = 366 * 24 * 3600.0
    raw = response.headers.get("Retry-After")
    if raw is None:
        return None
    try:
        seconds = float(raw)
    except ValueError:
        from email.utils import parsedate_to_datetime

        from django.utils import timezone

        try:
            seconds = (parsedate_to_datetime(raw) - timezone.now()).total_seconds()
        except (TypeError, ValueError, OverflowError):
            return None
    if math.isnan(seconds):
        return None
    return min(max(0.0, seconds), longest)


def classify_response(response: requests.Response) -> ActionError:
    status = response.status_code
    body = redact_text(response.text[:300])
    message = f"HTTP {status} from {response.request.method} {response.request.path_url.split('?')[0]}: {body}"
    if status == 429:
        return ActionError(FailureClass.RATE_LIMITED, message, retry_after=_retry_after(response))
    if status in (500, 502, 503, 504):
        return ActionError(FailureClass.TRANSIENT, message, retry_after=_retry_after(response))
    if status in (400, 404, 422):
        return ActionError(FailureClass.INVALID_ARGUMENTS, message)
    if status in (401, 403):
        return ActionError(FailureClass.PERMISSION_DENIED, message)
    if status == 409:
        return ActionError(FailureClass.CONFLICT, message)
    return ActionError(FailureClass.UNKNOWN, message)


def classify_exception(exc: requests.RequestException) -> ActionError:
    """Before the request was sent, nothing happened; after, anything may have."""
    text = redact_text(f"{type(exc).__name__}: {exc}")[:500]
    if isinstance(exc, requests.ConnectTimeout):
        return ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, text)
    if isinstance(exc, requests.ReadTimeout):
        return ActionError(FailureClass.TIMEOUT, text, outcome_unknown=True)
    if isinstance(exc, requests.ConnectionError):
        if "refused" in str(exc).lower() or "Failed to establish" in str(exc):
            return ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, text)
        return ActionError(FailureClass.TRANSIENT, text, outcome_unknown=True)
    return ActionError(FailureClass.UNKNOWN, text, outcome_unknown=True)


def call(method: str, url: str, *, operation_key: str | None = None, **kwargs) -> requests.Response:
    headers = kwargs.pop("headers", {})
    if operation_key:
        headers["Idempotency-Key"] = operation_key
    timeout = (min(2.0, settings.ACTION_TIMEOUT_SECONDS), settings.ACTION_TIMEOUT_SECONDS)
    try:
        response = http_session().request(method, url, headers=headers, timeout=timeout, **kwargs)
    except requests.RequestException as exc:
        raise classify_exception(exc) from None
    if response.status_code >= 400:
        raise classify_response(response)
    return response


# --- Built-in actions -----------------------------------------------------


def desk(path: str) -> str:
    return f"{settings.TICKET_DESK_URL}{path}"


class DeskAction(Action):
    """An action of the ticket desk: it calls TICKET_DESK_URL whatever its args."""

    def target_url(self, args):
        return settings.TICKET_DESK_URL


def _ticket_outcome(ticket: dict) -> Outcome:
    return Outcome(result={"id": ticket["id"], "status": ticket["status"]}, external_ref=f"ticket:{ticket['id']}")


@register
class TicketCreate(DeskAction):
    name = "ticket.create"
    idempotent = True
    can_lookup = True
    compensation = "ticket.close"
    required_args = ("title",)

    def validate(self, args):
        errors = super().validate(args)
        body = args.get("body")
        if "body" in args and not isinstance(body, str) and not is_reference(body) and not secrets.is_reference(body):
            errors["body"] = "Must be a string."
        return errors

    def perform(self, args, operation_key):
        payload = {"title": args["title"], "body": args.get("body", "")}
        response = call("POST", desk("/tickets"), operation_key=operation_key, json=payload)
        return _ticket_outcome(response.json())

    def lookup(self, operation_key):
        found = call("GET", desk("/tickets"), params={"idempotency_key": operation_key}).json()
        return _ticket_outcome(found[0]) if found else None

    def verify(self, outcome):
        return bool(outcome.result.get("id")) and outcome.result.get("status") in ("open", "closed")

    def compensation_args(self, args, result):
        return {"ticket_id": result["id"]}


@register
class TicketComment(DeskAction):
    name = "ticket.comment"
    idempotent = True
    compensation = None
    required_args = ("ticket_id", "body")

    def perform(self, args, operation_key):
        response = call(
            "POST",
            desk(f"/tickets/{args['ticket_id']}/comments"),
            operation_key=operation_key,
            json={"body": args["body"]},
        )
        comment = response.json()
        return Outcome(result={"ticket_id": args["ticket_id"], **comment}, external_ref=f"ticket:{args['ticket_id']}")


@register
class TicketClose(DeskAction):
    name = "ticket.close"
    # Closing a closed ticket is a no-op, so repeating it is harmless.
    idempotent = True
    compensation = None
    required_args = ("ticket_id",)

    def perform(self, args, operation_key):
        response = call("POST", desk(f"/tickets/{args['ticket_id']}/close"), operation_key=operation_key)
        return _ticket_outcome(response.json())

    def verify(self, outcome):
        return outcome.result.get("status") == "closed"


@register
class Noop(Action):
    """In-process and effect-free: for tests, demos and benchmarks."""

    name = "noop"
    idempotent = True
    in_process = True
    compensation = "noop"

    def validate(self, args):
        return {}

    def perform(self, args, operation_key):
        return Outcome(result=dict(args))

    def compensation_args(self, args, result):
        return dict(args)


@register
class HttpPost(Action):
    """A webhook. It carries the operation key as Idempotency-Key, but only
    the plan can say whether the receiver drops repeats
    (`receiver_honours_idempotency_key: true`); without that promise a
    repeat could act twice, and there is no way to ask the receiver what it
    received, so an unknown outcome goes IN_DOUBT."""

    name = "http.post"
    idempotent = False
    HONOURS_KEY = "receiver_honours_idempotency_key"
    compensation = None
    required_args = ("url",)

    def validate(self, args):
        errors = {}
        url = args.get("url")
        if not isinstance(url, str) or not url.startswith(("http://", "https://")):
            errors["url"] = "Must be an http:// or https:// URL."
        if "json" in args and not isinstance(args["json"], (dict, list)):
            errors["json"] = "Must be a JSON object or array."
        if self.HONOURS_KEY in args and not isinstance(args[self.HONOURS_KEY], bool):
            errors[self.HONOURS_KEY] = "Must be true or false."
        return errors

    def is_idempotent(self, args):
        return args.get(self.HONOURS_KEY) is True

    def perform(self, args, operation_key):
        response = call("POST", args["url"], operation_key=operation_key, json=args.get("json", {}))
        try:
            body = response.json()
        except ValueError:
            body = None
        return Outcome(result={"status": response.status_code, "body": body if isinstance(body, dict) else None})


@register
class EmailSend(Action):
    """Irreversible and not idempotent: once handed to the mail server it
    cannot be recalled, and sending again sends twice. Never retried blindly."""

    name = "email.send"
    idempotent = False
    compensation = None
    required_args = ("to", "subject", "body")

    def validate(self, args):
        errors = super().validate(args)
        to = args.get("to")
        recipients = to if isinstance(to, list) else [to]
        if "to" not in errors and not all(isinstance(r, str) and "@" in r for r in recipients):
            errors["to"] = "Must be an email address or a list of them."
        return errors

    def perform(self, args, operation_key):
        import smtplib
        import socket

        from django.core.mail import EmailMessage

        recipients = args["to"] if isinstance(args["to"], list) else [args["to"]]
        message = EmailMessage(subject=args["subject"], body=args["body"], to=recipients,
                               headers={"X-Operation-Key": operation_key})
        try:
            message.send(fail_silently=False)
        except smtplib.SMTPRecipientsRefused as exc:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"recipients refused: {list(exc.recipients)}") from None
        except smtplib.SMTPAuthenticationError:
            raise ActionError(FailureClass.PERMISSION_DENIED, "the mail server refused our credentials") from None
        except (ConnectionRefusedError, smtplib.SMTPConnectError) as exc:
            raise ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, f"mail server unavailable: {exc}") from None
        except (socket.timeout, smtplib.SMTPServerDisconnected, OSError) as exc:
            # The message may or may not have been accepted.
            raise ActionError(FailureClass.TIMEOUT, f"mail server did not confirm: {exc}",
                              outcome_unknown=True) from None
        return Outcome(result={"to": recipients, "subject": args["subject"]},
                       external_ref=f"email:{operation_key}")
