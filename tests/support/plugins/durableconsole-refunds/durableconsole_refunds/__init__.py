"""Refunds through the support desk: each refund opens one ticket for the
payments team, at most once per operation key, however often the console
retries. The desk's address comes from REFUNDS_DESK_URL, read when a refund
runs (workers need it; the web process does not)."""

import os
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field

from workflows.actions import Action, Outcome, Preview, call, register


class RefundArgs(BaseModel):
    model_config = ConfigDict(strict=True, extra="forbid")

    order_id: str = Field(min_length=1, max_length=64, description="The order to refund.")
    amount_cents: int = Field(gt=0, le=1_000_000, description="How much, in cents.")
    currency: Literal["EUR", "GBP", "USD"] = "EUR"
    reason: str = Field(default="", max_length=500)


def desk(path: str) -> str:
    return os.environ.get("REFUNDS_DESK_URL", "http://127.0.0.1:8100").rstrip("/") + path


def _outcome(ticket: dict) -> Outcome:
    return Outcome(
        result={"refund_ticket": ticket["id"], "status": ticket["status"]}, external_ref=f"refund:{ticket['id']}"
    )


@register
class Refund(Action):
    name = "refunds.refund"
    Args = RefundArgs
    # The desk opens one ticket per Idempotency-Key, and finds it by that key.
    idempotent = True
    can_lookup = True
    # Money sent is not taken back by another action: irreversible.
    compensation = None

    def target_url(self, args):
        return desk("")

    def perform(self, args, operation_key):
        refund = RefundArgs.model_validate(args)
        title = f"Refund {refund.amount_cents / 100:.2f} {refund.currency} on order {refund.order_id}"
        ticket = call(
            "POST", desk("/tickets"), operation_key=operation_key, json={"title": title, "body": refund.reason}
        ).json()
        return _outcome(ticket)

    def lookup(self, operation_key):
        found = call("GET", desk("/tickets"), params={"idempotency_key": operation_key}).json()
        return _outcome(found[0]) if found else None

    def verify(self, outcome):
        return bool(outcome.result.get("refund_ticket"))

    def preview(self, args):
        refund = RefundArgs.model_validate(args)
        return Preview(
            summary=f"Refund {refund.amount_cents / 100:.2f} {refund.currency} on order {refund.order_id}",
            details={"order_id": refund.order_id, "amount_cents": refund.amount_cents, "currency": refund.currency},
        )
