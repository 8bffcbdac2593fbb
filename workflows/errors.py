"""Domain errors that views and the API turn into answers."""


class DomainError(Exception):
    code = "error"
    status = 400

    def __init__(self, message: str):
        super().__init__(message)
        self.message = message


class NotAllowed(DomainError):
    code = "forbidden"
    status = 403


class WrongState(DomainError):
    code = "conflict"
    status = 409
