"""`email.send`: a message handed to the configured mail server."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

from django.conf import settings
from django.core.exceptions import ValidationError as DjangoValidationError
from django.core.validators import validate_email
from pydantic import Field, ValidationError
from pydantic_core import PydanticCustomError, core_schema

from durableconsole import proof
from workflows.actions.args import ONE_LINE, ArgsModel, Check, Ref
from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.context import mail_headers
from workflows.actions.registry import register
from workflows.actions.templates import MailMessage, text
from workflows.audit import secrets
from workflows.states import FailureClass


def _is_address(value: str) -> bool:
    try:
        validate_email(value)
    except DjangoValidationError:
        return False
    return True


@dataclass(frozen=True)
class _OneOrMany:
    """A list, or one item on its own: `"a@example.com"` or `["a@…", "b@…"]`."""

    def __get_pydantic_core_schema__(self, source, handler):
        return core_schema.no_info_wrap_validator_function(self._validate, handler(source))

    def __get_pydantic_json_schema__(self, schema, handler):
        many = handler(schema)
        return {"anyOf": [many["items"], many]}

    @staticmethod
    def _validate(value, handler):
        if not isinstance(value, str):
            return handler(value)
        try:
            handler([value])
        except ValidationError as exc:
            # The error of the one item, at the field's own path.
            raise PydanticCustomError("address", "{message}", {"message": exc.errors()[0]["msg"]}) from None
        return value


Address = Annotated[str, Field(max_length=254), Check(_is_address, "Not an email address.", format="email")]
Recipients = Annotated[list[Address], Field(min_length=1, max_length=50), _OneOrMany()]
# A header line: one line, or the message could carry headers of its own.
Subject = Annotated[str, Field(min_length=1, max_length=998), ONE_LINE]
Body = Annotated[str, Field(max_length=100_000)]


def _listed(recipients: str | list[str]) -> list[str]:
    return recipients if isinstance(recipients, list) else [recipients]


@register
class EmailSend(Action):
    """Irreversible and not idempotent: once handed to the mail server it
    cannot be recalled, and sending again sends twice. Never retried blindly."""

    name = "email.send"
    idempotent = False
    compensation = None

    class Args(ArgsModel):
        # Recipients are never references: the reviewer approves who gets it.
        to: Recipients = Field(description="An email address, or a list of 1 to 50.")
        cc: Recipients | None = Field(None, description="An email address, or a list of 1 to 50.")
        subject: Ref[Subject] = Field(description="One line, 1 to 998 characters.")
        body: Ref[Body] = Field(description="Plain text.")

    def target_hosts(self, args):
        """A secret in a message goes to every recipient's mail domain."""
        everyone = [*_listed(args.get("to") or []), *_listed(args.get("cc") or [])]
        return [address.rpartition("@")[2].lower() if isinstance(address, str) else None for address in everyone]

    def preview(self, args):
        def addresses(value):
            value = secrets.shown(value)
            return value if isinstance(value, list) else [] if value is None else [value]

        to, cc = addresses(args.get("to")), addresses(args.get("cc"))
        subject = secrets.shown(args.get("subject"))
        everyone = ", ".join(str(address) for address in to + cc)
        return Preview(
            f"Send “{subject}” to {everyone}",
            {"from": settings.DEFAULT_FROM_EMAIL, "to": to, "cc": cc, "subject": subject},
        )

    def request(self, args):
        """The message as the mail server gets it: sender, recipients, subject, text."""
        copied = _listed(args["cc"]) if args.get("cc") is not None else []
        return MailMessage(
            settings.DEFAULT_FROM_EMAIL,
            tuple(_listed(args["to"])),
            tuple(copied),
            text(args["subject"]),
            text(args["body"]),
        )

    def perform(self, args, operation_key):
        import smtplib

        from django.core.mail import EmailMessage

        filled = self.request(args).sent()
        recipients, copied = filled["to"], filled["cc"]
        # Sent with the line endings SMTP gives it anyway, so that the text
        # the proof covers is the text as sent.
        body = proof.mail_body(filled["body"])
        message = EmailMessage(
            subject=filled["subject"],
            body=body,
            from_email=filled["from"],
            to=recipients,
            cc=copied,
            headers=mail_headers(operation_key, recipients + copied, body),
        )
        try:
            message.send(fail_silently=False)
        except smtplib.SMTPRecipientsRefused as exc:
            raise ActionError(FailureClass.INVALID_ARGUMENTS, f"recipients refused: {list(exc.recipients)}") from None
        except smtplib.SMTPAuthenticationError:
            raise ActionError(FailureClass.PERMISSION_DENIED, "the mail server refused our credentials") from None
        except (ConnectionRefusedError, smtplib.SMTPConnectError) as exc:
            raise ActionError(FailureClass.DEPENDENCY_UNAVAILABLE, f"mail server unavailable: {exc}") from None
        except (TimeoutError, smtplib.SMTPServerDisconnected, OSError) as exc:
            # The message may or may not have been accepted.
            raise ActionError(
                FailureClass.TIMEOUT, f"mail server did not confirm: {exc}", outcome_unknown=True
            ) from None
        sent = {"to": recipients, "subject": filled["subject"]}
        if copied:
            sent["cc"] = copied
        return Outcome(result=sent, external_ref=f"email:{operation_key}")
