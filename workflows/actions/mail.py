"""`email.send`: a message handed to the configured mail server."""

from __future__ import annotations

from django.conf import settings

from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.registry import register
from workflows.audit import secrets
from workflows.states import FailureClass


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

    def preview(self, args):
        def addresses(value):
            value = secrets.shown(value)
            return value if isinstance(value, list) else [] if value is None else [value]

        to, cc = addresses(args.get("to")), addresses(args.get("cc"))
        subject = secrets.shown(args.get("subject"))
        everyone = ", ".join(str(address) for address in to + cc)
        return Preview(f"Send “{subject}” to {everyone}",
                       {"from": settings.DEFAULT_FROM_EMAIL, "to": to, "cc": cc, "subject": subject})

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
