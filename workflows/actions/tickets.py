"""The ticket desk's actions: create, comment on and close tickets."""

from __future__ import annotations

from typing import Annotated
from urllib.parse import quote

from django.conf import settings
from pydantic import Field

from workflows.actions.args import NOT_BLANK, ArgsModel, Ref
from workflows.actions.base import Action, ActionError, Outcome, Preview
from workflows.actions.registry import register
from workflows.actions.templates import HttpRequest, Text, json_text, text
from workflows.actions.transport import call
from workflows.audit import secrets
from workflows.states import FailureClass

# The desk refuses a title or comment that is empty or only blanks, and
# reads a ticket id as at most 18 digits.
Title = Annotated[str, Field(min_length=1, max_length=200), NOT_BLANK]
Body = Annotated[str, Field(max_length=50_000)]
CommentBody = Annotated[str, Field(min_length=1, max_length=50_000), NOT_BLANK]
TicketId = Annotated[int, Field(ge=1, le=10**18 - 1)]
# A ticket id is taken from the result of the step that opened the ticket;
# a private system's ids may also travel as a secret, which then goes, as
# text, in the URL path (to SECRETS_POLICY's hosts only).
TICKET_ID = 'The desk\'s ticket id, usually {"$from": "<step>.result.id"}.'


def desk(path: str) -> str:
    return f"{settings.TICKET_DESK_URL}{path}"


def _ticket_path(ticket_id) -> Text:
    """A ticket's path on the desk: its id, or the placeholder of the
    reference it is taken from, written into the path as it is sent."""
    return text(ticket_id, lambda value: quote(str(value), safe=""))


def _post(path: Text, body: dict | None = None) -> HttpRequest:
    """A write to the desk at TICKET_DESK_URL, with a JSON body or none."""
    url = (desk(""), *path)
    if body is None:
        return HttpRequest("POST", url)
    return HttpRequest("POST", url, (("Content-Type", ("application/json",)),), json_text(body))


def _send(request: HttpRequest, operation_key: str):
    sent = request.sent()
    return call(
        "POST", sent["url"], operation_key=operation_key, headers=sent["headers"], data=sent["body"].encode() or None
    )


class DeskAction(Action):
    """An action of the ticket desk: it calls TICKET_DESK_URL whatever its args."""

    def target_url(self, args):
        return settings.TICKET_DESK_URL


def _kept_secret(ticket_id) -> Preview | None:
    """The preview of a step whose ticket id travels as a secret: a preview
    never sees a secret's value, so it reads no ticket and says so (its
    request's template, which the approval binds, names the secret)."""
    if not secrets.is_reference(ticket_id):
        return None
    named = secrets.shown(ticket_id)
    return Preview(f"The ticket whose id is {named} (not read: a preview never sees a secret)", {"ticket": named})


def _ticket_as_it_stands(ticket_id) -> dict:
    """The ticket's id, title and status, read from the desk (a 404 is the
    plan's fault: INVALID_ARGUMENTS). Its comments are left out: a comment
    added meanwhile does not change what closing or commenting means."""
    if isinstance(ticket_id, bool) or not isinstance(ticket_id, (str, int)):
        raise ActionError(FailureClass.INVALID_ARGUMENTS, "ticket_id is not a ticket number")
    ticket = call("GET", desk(f"/tickets/{quote(str(ticket_id), safe='')}")).json()
    return {"id": ticket["id"], "title": ticket["title"], "status": ticket["status"]}


def _ticket_outcome(ticket: dict) -> Outcome:
    return Outcome(result={"id": ticket["id"], "status": ticket["status"]}, external_ref=f"ticket:{ticket['id']}")


@register
class TicketCreate(DeskAction):
    name = "ticket.create"
    idempotent = True
    can_lookup = True
    compensation = "ticket.close"

    class Args(ArgsModel):
        title: Ref[Title] = Field(description="1 to 200 characters, not only blanks.")
        body: Ref[Body] = Field("", description="The ticket's text.")

    def preview(self, args):
        title, body = secrets.shown(args.get("title")), secrets.shown(args.get("body", ""))
        host = secrets.host_of(settings.TICKET_DESK_URL)
        return Preview(
            f"Create a ticket “{title}” on the desk at {host}",
            {"desk": host, "title": title, "body_characters": len(body) if isinstance(body, str) else None},
        )

    def request(self, args):
        return _post(("/tickets",), {"title": args["title"], "body": args.get("body", "")})

    def perform(self, args, operation_key):
        return _ticket_outcome(_send(self.request(args), operation_key).json())

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

    class Args(ArgsModel):
        ticket_id: Ref[TicketId] = Field(description=TICKET_ID)
        body: Ref[CommentBody] = Field(description="The comment, not only blanks.")

    def preview(self, args):
        kept = _kept_secret(args["ticket_id"])
        if kept is not None:
            return kept
        ticket = _ticket_as_it_stands(args["ticket_id"])
        return Preview(
            f"Comment on ticket #{ticket['id']} “{ticket['title']}” ({ticket['status']})", {"ticket": ticket}
        )

    def request(self, args):
        return _post(("/tickets/", *_ticket_path(args["ticket_id"]), "/comments"), {"body": args["body"]})

    def perform(self, args, operation_key):
        comment = _send(self.request(args), operation_key).json()
        return Outcome(result={"ticket_id": args["ticket_id"], **comment}, external_ref=f"ticket:{args['ticket_id']}")


@register
class TicketClose(DeskAction):
    name = "ticket.close"
    # Closing a closed ticket is a no-op, so repeating it is harmless.
    idempotent = True
    compensation = None
    # What closing means depends on the ticket as it stands: one closed (or
    # retitled) since the reviewer looked is not what they approved.
    preview_binding = True

    class Args(ArgsModel):
        ticket_id: Ref[TicketId] = Field(description=TICKET_ID)

    def preview(self, args):
        kept = _kept_secret(args["ticket_id"])
        if kept is not None:
            return kept
        ticket = _ticket_as_it_stands(args["ticket_id"])
        return Preview(f"Close ticket #{ticket['id']} “{ticket['title']}” (now {ticket['status']})", {"ticket": ticket})

    def request(self, args):
        return _post(("/tickets/", *_ticket_path(args["ticket_id"]), "/close"))

    def perform(self, args, operation_key):
        return _ticket_outcome(_send(self.request(args), operation_key).json())

    def verify(self, outcome):
        return outcome.result.get("status") == "closed"
