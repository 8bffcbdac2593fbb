"""schemathesis against the published OpenAPI schema: whatever a client
sends, the API answers without a server error and as its schema says."""

import pytest
import schemathesis
from schemathesis.checks import (
    content_type_conformance,
    not_a_server_error,
    response_headers_conformance,
    response_schema_conformance,
    status_code_conformance,
)
from django.core.wsgi import get_wsgi_application
from hypothesis import HealthCheck, settings

from workflows.operations import tokens

app = get_wsgi_application()


@pytest.fixture
def api_schema():
    return schemathesis.openapi.from_wsgi("/api/v1/openapi.json", app)


schema = schemathesis.pytest.from_fixture("api_schema")


@pytest.fixture
def bearer(people):
    """A token of a user in every role, so authorization never hides a code path."""
    return {"Authorization": f"Bearer {tokens.issue(people['admin'])}"}


@schema.parametrize()
@settings(max_examples=25, deadline=None,
          suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow,
                                 HealthCheck.filter_too_much])
@pytest.mark.django_db(transaction=True)
def test_api_never_errors_and_matches_its_schema(case, bearer):
    # Semantic refusals of schema-valid input (an unknown action, a missing
    # ticket title) are correct 400s, so "positive data acceptance" is not
    # checked; everything about the answers themselves is.
    case.call_and_validate(headers=bearer, checks=[
        not_a_server_error, status_code_conformance, content_type_conformance,
        response_schema_conformance, response_headers_conformance,
    ])
