"""The JSON API (docs/reference/http-api.md#http-api): agents submit plans; people decide over HTTP.
One router per resource; the routes' paths are written out whole."""

from django.views.decorators.http import require_safe

from workflows.api import (
    actions,
    analytics,
    audit,
    claims,
    compensations,
    deadletters,
    decisions,
    delegation,
    errors,
    grants,
    jobs,
    policies,
    policy_sets,
    steps,
    webhooks,
    workflows,
)
from workflows.api.auth import BearerToken
from workflows.api.openapi import DurableAPI, Swagger
from workflows.web.jsonparse import DepthLimitedParser

api = DurableAPI(
    title="Durable Console API",
    version="1",
    auth=BearerToken(),
    urls_namespace="api",
    parser=DepthLimitedParser(),
    openapi_url="/openapi.json",
    docs_url="/docs",
    docs=Swagger(),
    # The schema and its docs page are read, as the operations' wrong methods are refused: 405 with Allow.
    docs_decorator=require_safe,
)
errors.install(api)
for resource in (
    workflows,
    decisions,
    steps,
    claims,
    actions,
    deadletters,
    jobs,
    compensations,
    policies,
    policy_sets,
    grants,
    audit,
    webhooks,
    delegation,
    analytics,
):
    api.add_router("", resource.router)
