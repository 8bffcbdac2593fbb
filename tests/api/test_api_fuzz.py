"""schemathesis against the published OpenAPI schema: whatever a client
sends, the API answers without a server error and as its schema says; a
cursor no page gave out, and a wait for anything but a decision or the end
for 1 to 60 seconds, are refused with exactly a 400 and their code."""

import base64
import json
import re

import pytest
import schemathesis
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)

from workflows.operations import tokens

app = get_wsgi_application()


def _a_cursor_at_all(text: str) -> bool:
    """Whether `text` has the form of a cursor (base64 of a JSON list);
    whether its values are sound is for the pagination to say."""
    try:
        return isinstance(json.loads(base64.urlsafe_b64decode(text + "=" * (-len(text) % 4))), list)
    except (ValueError, UnicodeError):
        return False


def _refused(response, codes: set[str]) -> str | None:
    """None when the answer is a 400 with one of `codes`, else what it was."""
    try:
        code = response.json()["error"]["code"]
    except (ValueError, KeyError, TypeError):
        code = None
    return None if response.status_code == 400 and code in codes else f"{response.status_code} {code}"


@schemathesis.check
def a_forged_cursor_is_a_400(ctx, response, case):
    cursor = (case.query or {}).get("cursor")
    if not isinstance(cursor, str) or not cursor or _a_cursor_at_all(cursor):
        return None
    if response.status_code == 401:
        return None  # who asks is checked before what they ask: a request without a valid token is a 401
    # Another parameter may be refused first: a 400 still, with the code of its kind.
    wrong = _refused(response, {"invalid_cursor", "invalid"})
    assert wrong is None, f"{case.path} with cursor {cursor!r} answered {wrong}"
    return None


@schemathesis.check
def a_bad_wait_is_a_400(ctx, response, case):
    if not case.path.endswith("/wait") or response.status_code == 401:
        return None  # a request without a valid token is a 401 before its parameters are read
    query = case.query or {}
    until, timeout = query.get("until", "decision"), query.get("timeout", 30)
    if not isinstance(until, str):
        return None  # a list or an object: how it goes into a query string is the client's affair
    if until not in ("decision", "terminal"):
        bad = True
    elif isinstance(timeout, str) and not re.search(r"[0-9]", timeout):
        bad = True  # no number at all
    elif type(timeout) is int:
        bad = not 1 <= timeout <= 60
    else:
        return None  # text with digits ("5.0", " 5"): the parser's lenience is not this check's concern
    if bad:
        wrong = _refused(response, {"invalid"})
        assert wrong is None, f"a wait with {query!r} answered {wrong}"
    return None


@pytest.fixture
def api_schema():
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
def bearer(people):
    """A token of a user in every role, so authorization never hides a code path."""
    return {"Authorization": f"Bearer {tokens.issue(people['admin'])}"}


@schema.parametrize()
@settings(
    max_examples=10,
    deadline=None,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.filter_too_much],
)
@pytest.mark.django_db(transaction=True)
def test_api_never_errors_and_matches_its_schema(case, bearer):
    # Semantic refusals of schema-valid input (an unknown action, a missing
    # ticket title) are correct 400s, so "positive data acceptance" is not
    # checked; everything about the answers themselves is.
    case.call_and_validate(
        headers=bearer,
        checks=[
            not_a_server_error,
            status_code_conformance,
            content_type_conformance,
            response_schema_conformance,
            response_headers_conformance,
            a_forged_cursor_is_a_400,
            a_bad_wait_is_a_400,
        ],
    )
