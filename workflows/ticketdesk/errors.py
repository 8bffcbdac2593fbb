"""``DeskError``: every error the ticket desk answers as JSON."""

from __future__ import annotations


class DeskError(Exception):
    """An error answered to the client as ``{"error": {"code", "message"}}``."""

    def __init__(self, status: int, code: str, message: str, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status = status
        self.code = code
        self.message = message
        self.headers = headers or {}
