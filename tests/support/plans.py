"""Plans of the main use case, as an agent submits them."""


def ticket_plan(key="plan-1", **extra):
    """The three-step plan of the main use case: later steps use $from."""
    return {
        "name": "Open, comment on and close a ticket",
        "submission_key": key,
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire", "body": "Floor 3"}},
            {
                "key": "note",
                "action": "ticket.comment",
                "args": {"ticket_id": {"$from": "open.result.id"}, "body": "Extinguisher on its way"},
            },
            {"key": "close", "action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
        ],
        **extra,
    }


def gated_plan(key="gated-1", approvals=1, note="Check the ticket before closing it"):
    return {
        "name": "Open a ticket, then close it once a person looked",
        "submission_key": key,
        "steps": [
            {
                "key": "open",
                "action": "ticket.create",
                "args": {"title": "Printer on fire"},
                "compensation": {"action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
            },
            {
                "key": "close",
                "action": "ticket.close",
                "args": {"ticket_id": {"$from": "open.result.id"}},
                "gate": {"approvals": approvals, "note": note},
            },
        ],
    }
