"""Domain errors that views and the API turn into answers."""


class DomainError(Exception):
    code = "error"
    status = 400
    # Per-field messages, keyed by the field's name, when the error is about input.
    fields: dict[str, str] | None = None
    # More members of the error object, for a client to act on (a stale
    # decision's `current`).
    details: dict | None = None

    def __init__(self, message: str, fields: dict[str, str] | None = None, details: dict | None = None):
        super().__init__(message)
        self.message = message
        if fields is not None:
            self.fields = fields
        if details is not None:
            self.details = details


class NotAllowed(DomainError):
    code = "forbidden"
    status = 403


class NotVisible(DomainError):
    """The object is outside the user's teams: answered as if it did not exist."""

    code = "not_found"
    status = 404


class Archived(DomainError):
    """The object was moved out to an archive (docs/explanation/operations-at-scale.md#operations-at-scale): gone, not
    unknown."""

    code = "archived"
    status = 410


class WrongState(DomainError):
    code = "conflict"
    status = 409


class PreviewPending(WrongState):
    """An action that requires its preview before approval has none yet."""

    code = "preview_pending"


class PreviewChanged(WrongState):
    """The previews are no longer those the reviewer was shown."""

    code = "preview_changed"


class StaleRevision(WrongState):
    """A decision names a revision or plan hash that is no longer current:
    nothing was recorded; `details["current"]` names what is."""

    code = "stale_revision"
