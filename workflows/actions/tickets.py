"""The ticket desk's actions: create, comment on and close tickets."""

from __future__ import annotations

from django.conf import settings

from workflows.actions.base import Action, Outcome, is_reference
from workflows.actions.registry import register
from workflows.actions.transport import call
from workflows.audit import secrets


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
