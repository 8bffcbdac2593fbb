from workflows.actions import Action, Outcome


class TicketCreateAgain(Action):
    """Named like a built-in: it must not take the built-in's place."""

    name = "ticket.create"

    def perform(self, args, operation_key):
        return Outcome(result={"id": 0, "status": "open"})
