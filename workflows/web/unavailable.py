"""No database connection for a request: 503 with Retry-After, never a 500
(docs/deploying.md#database-connections).

A web process takes its connections from a bounded pool (DB_POOL_MAX); a
request that waits DB_POOL_TIMEOUT for one, or that PostgreSQL turns away
for lack of slots, is answered 503 with `Retry-After`: the API in its error
shape, a console page in plain text. Any other database error is left to
the usual handling.
"""

import psycopg
from django.db import OperationalError, connection
from django.http import HttpResponse, JsonResponse
from psycopg_pool import PoolTimeout

RETRY_AFTER_SECONDS = 2
MESSAGE = "No database connection is free at the moment; try again shortly."
# SQLSTATE 53300, too_many_connections. A refused connection attempt carries
# no SQLSTATE in psycopg, only the server's FATAL message (in English unless
# the server's lc_messages says otherwise): max_connections, the slots kept
# for superusers or for pg_use_reserved_connections, a role's or a database's
# CONNECTION LIMIT.
TOO_MANY_CONNECTIONS = "53300"
REFUSALS = (
    "too many clients already",
    "remaining connection slots are reserved",
    "too many connections for role",
    "too many connections for database",
)


def no_connection(exc: BaseException) -> bool:
    """Whether `exc` (Django's wrapper or the driver's error) means no
    connection could be had: the pool's wait ran out, or the server refused
    one for lack of slots."""
    while exc is not None:
        if isinstance(exc, PoolTimeout):
            return True
        if isinstance(exc, psycopg.OperationalError):
            return exc.sqlstate == TOO_MANY_CONNECTIONS or any(text in str(exc) for text in REFUSALS)
        exc = exc.__cause__
    return False


def refusal(request) -> HttpResponse:
    if request.path.startswith("/api/"):
        response = JsonResponse({"error": {"code": "unavailable", "message": MESSAGE}}, status=503)
    else:
        response = HttpResponse(MESSAGE, status=503, content_type="text/plain")
    response["Retry-After"] = str(RETRY_AFTER_SECONDS)
    return response


class RefuseWithoutConnection:
    """Takes the request's connection before anything that reads the
    database (sessions, sign-in, the view), so that a refusal there is
    answered 503 instead of surfacing as a 500 from whichever middleware
    queried first; a view that connects again later is answered the same
    (the API's own views through workflows.api.errors)."""

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        # SQLite never lacks a connection: only PostgreSQL's is taken ahead.
        if connection.vendor != "postgresql":
            return self.get_response(request)
        try:
            connection.ensure_connection()
        except OperationalError as exc:
            if no_connection(exc):
                return refusal(request)
            # Anything else (the server down, a bad password) is met again at
            # the first query, and answered as it always was (/healthz: 503).
        return self.get_response(request)

    def process_exception(self, request, exc):
        if isinstance(exc, OperationalError) and no_connection(exc):
            return refusal(request)
        return None
