"""No input gives a 500 (docs/explanation/trust-core.md#no-5xx-on-input), walked: generated hostile requests go to
every URL pattern of the URL conf (the admin site included) and every
operation of the OpenAPI schema, as an admin who holds every role (and is a
superuser, so the admin's pages run), with CSRF checks on as in production.
"""

import json
import re
from datetime import UTC, datetime, timedelta
from urllib.parse import quote, urlencode

import hypothesis
import pytest
from django.contrib.auth.models import Group
from django.contrib.contenttypes.models import ContentType
from django.db import transaction
from django.urls import URLPattern, URLResolver, get_resolver
from hypothesis import HealthCheck, assume, given
from hypothesis import strategies as st

from tests.support import deciding as decide
from tests.support.hostile import CONSOLE_LISTS, FORGED_CURSORS, HOSTILE_BODIES, TEMPLATES, ZERO_UUID, api_lists
from tests.support.plans import ticket_plan
from tests.support.running import run_until
from workflows.models import ActionPolicy, DeadLetter, Workflow
from workflows.operations import bulk, compensation, grants, links, plans, policies, tokens
from workflows.web import waiting
from workflows.webhooks import endpoints as webhook_endpoints
from workflows.webhooks.models import WebhookDelivery

HTTP_METHODS = ["GET", "POST", "PUT", "DELETE", "HEAD"]


NASTY_TEXT = [
    "\x00",
    "a\x00b",
    "\ud800",
    "\udfff",
    "٣",
    "²",
    "9" * 5000,
    "9" * 30,
    str(2**63),
    str(-(2**63) - 1),
    "-1",
    "1e999",
    "NaN",
    "inf",
    "-5",
    "",
    " ",
    "null",
    "[]",
    "{}",
    "true",
    "0",
    "9999-12-31T23:59:59-23:59",
    "0001-01-01T00:00:00+23:59",
    "2024-02-30",
    "not-a-uuid",
    ZERO_UUID,
    "<script>alert(1)</script>",
    "' OR '1'='1",
    "%00",
    "x" * 3000,
    "all",
    "filter",
    "retry",
    "happened",
    "OPEN",
    "../../etc/passwd",
    *FORGED_CURSORS.values(),
]
# Every name a view or operation reads, and some that admin pages read. Not
# "post": it confirms the admin's bulk deletion, which would take the fixtures away.
PARAM_NAMES = [
    "cursor",
    "status",
    "limit",
    "workflow",
    "actor",
    "verb",
    "since",
    "until",
    "action",
    "failure_class",
    "age",
    "scope",
    "ids",
    "dry_run",
    "only",
    "reason",
    "comment",
    "decision",
    "external_ref",
    "steps",
    "username",
    "password",
    "next",
    "q",
    "o",
    "p",
    "e",
    "all",
    "_popup",
    "_to_field",
    "_changelist_filters",
    "term",
    "app_label",
    "model_name",
    "field_name",
    "title",
    "body",
    "name",
    "submission_key",
    "id__exact",
    "action__exact",
]
HOSTILE_PATH_VALUES = [
    "not-a-uuid",
    ZERO_UUID,
    "%00",
    "a%00b",
    "%ED%A0%80",
    "%FF",
    "%D9%A3",
    "9" * 5000,
    "9" * 30,
    "-1",
    "..%2F..%2Fetc",
    "x" * 300,
]
# One of each kind, for the exhaustive walk; the generated walks draw from all.
PATH_PROBES = ["not-a-uuid", "a%00b", "%D9%A3", "9" * 30, "9" * 5000]
# The worst first: hypothesis draws the first elements of a list more often.
NASTY_JSON_LEAVES = [
    float("nan"),
    "\x00",
    float("inf"),
    "\ud800",
    2**63,
    10**400,
    -(2**63) - 1,
    None,
    True,
    0,
    -1,
    1.5,
    2**63 - 1,
    1e308,
    "",
    "٣",
    "x" * 5000,
    [],
    {},
    {"$from": "nowhere.result.id"},
    {"$from": 1},
    {"$secret": "NOPE"},
    {"$secret": "\x00"},
]
RAW_JSON_BODIES = [text for text, _ in HOSTILE_BODIES.values()] + [
    "",
    " ",
    "{}",
    '{"reason": "\\u0000"}',
    '{"comment": 1e999}',
    '{"reason": "' + "x" * 5000 + '"}',
    '{"reason": "r", "steps": ["\\ud800"]}',
    '{"reason": "r", "steps": "open"}',
    '{"reason": null}',
    '{"comment": ["x"]}',
    '{"reason": "r", "steps": [1, 2]}',
    '{"reason": "r"}',
    '{"comment": "ok"}',
    "[" * 40 + "]" * 40,
]
# The known nasty values, mixed with generated ones.
json_values = st.recursive(
    st.sampled_from(NASTY_JSON_LEAVES) | (st.integers() | st.text(max_size=20) | st.floats()),
    lambda inner: st.lists(inner, max_size=3) | st.dictionaries(st.text(max_size=8), inner, max_size=3),
    max_leaves=8,
)
query_values = st.sampled_from(NASTY_TEXT) | (st.text(max_size=30) | st.integers().map(str))
params = st.lists(
    st.tuples(st.sampled_from(PARAM_NAMES) | st.text(max_size=10).filter(lambda n: n != "post"), query_values),
    max_size=5,
)
# Every list reads one: the page walk adds one to half its requests, the API walk uses these for it.
cursors = st.sampled_from(list(FORGED_CURSORS.values())) | st.text(max_size=40)


def _walk(resolver, prefix=""):
    for pattern in resolver.url_patterns:
        if isinstance(pattern, URLResolver):
            yield from _walk(pattern, prefix + str(pattern.pattern))
        else:
            assert isinstance(pattern, URLPattern)
            yield prefix + str(pattern.pattern)


def url_templates() -> list[str]:
    """Every URL pattern as a template with `<name>` placeholders, regex
    patterns (the admin's app index and catch-all) included."""
    templates = []
    for route in _walk(get_resolver()):
        route = re.sub(r"\(\?P<(\w+)>[^)]*\)", r"<\1>", route).replace("^", "").replace("$", "")
        templates.append(re.sub(r"<(?:\w+:)?(\w+)>", r"<\1>", route))
    return sorted(set(templates))


@pytest.fixture
def world(people, desk, monkeypatch):
    """One object of every kind the URLs name: a plan awaiting review, a
    completed workflow with a compensation requested, a dead letter."""
    planned = plans.submit(people["agent"], ticket_plan(key="planned")).workflow
    done = plans.submit(
        people["agent"],
        {
            "name": "done",
            "submission_key": "done",
            "steps": [{"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}}],
        },
    ).workflow
    decide.approve(done, by=people["reviewer"])
    run_until(done.pk, "COMPLETE")
    comp = compensation.request(done, by=people["operator"], reason="undo it")
    failed = plans.submit(
        people["agent"],
        {
            "name": "failed",
            "submission_key": "failed",
            "steps": [
                {"key": "find", "action": "noop", "args": {"ticket": 999999}},
                {
                    "key": "note",
                    "action": "ticket.comment",
                    "args": {"ticket_id": {"$from": "find.result.ticket"}, "body": "b"},
                },
            ],
        },
    ).workflow
    decide.approve(failed, by=people["reviewer"])
    run_until(failed.pk, "FAILED")
    dead = DeadLetter.objects.get(workflow=failed)
    policies.change("noop", by=people["operator"], reason="tighten", changes={"enabled": False})
    loosen = policies.change("noop", by=people["operator"], reason="loosen", changes={"enabled": True}).request
    # The walks are about input: a wait on the plan nobody decides answers as
    # it stands (after the same checks) instead of spending its timeout on each request.
    monkeypatch.setattr(waiting, "wait_for", lambda request, workflow_id, until, seconds, read: read())
    endpoint, _ = webhook_endpoints.create(by=people["operator"], url="https://hooks.example.com/in")
    delivery = WebhookDelivery.objects.create(
        event="workflow.failed", workflow=failed, endpoint=endpoint, body="{}", status=WebhookDelivery.Status.DEAD
    )
    job, _ = bulk.reconcile(people["operator"], {"workflow": failed.pk}, shown_filter={}, dry_run=True)
    until = datetime.now(UTC) + timedelta(days=1)
    granted = grants.create(
        people["reviewer"], agent="agent", action="ticket.comment", when="true", max_uses=2, until=until
    )
    # A superuser too, so that the admin's pages and forms run instead of answering 403.
    people["admin"].is_superuser = True
    people["admin"].save(update_fields=["is_superuser"])
    return {
        "workflow_id": [str(planned.pk), str(done.pk), str(failed.pk)],
        "step_key": ["open", "note"],
        "compensation_id": [str(comp.pk)],
        "dead_letter_id": [str(dead.pk)],
        "job_id": [str(job.pk)],
        "endpoint_id": [str(endpoint.pk)],
        "delivery_id": [str(delivery.pk)],
        # A standing grant awaiting its second reviewer (the walking admin).
        "grant_id": [str(granted.pk)],
        "name": ["ticket.create", "noop"],
        "change_id": [str(loosen.pk)],
        # A team's policy set, and the global one.
        "team": ["default", "global"],
        "object_id": [str(people["admin"].pk), str(Group.objects.first().pk), str(ActionPolicy.objects.first().pk)],
        "id": [str(people["admin"].pk)],
        "content_type_id": [str(ContentType.objects.get_for_model(Workflow).pk)],
        "app_label": ["workflows", "auth"],
        "url": ["workflows/", "nowhere/"],
        # A real review link of the walking admin's (its page, and its POST deciding once).
        "token": [links.make(planned, people["admin"], "approve"), links.make(planned, people["admin"], "reject")],
    }


def deletes_nothing(url: str) -> bool:
    """Any POST to an admin deletion page confirms it; those pages are walked with GET only."""
    return not (url.startswith("/admin/") and url.endswith("/delete/"))


def fill(template: str, draw, world) -> str:
    def value(match):
        name = match.group(1)
        real = [quote(v, safe="") for v in world.get(name, [])]
        hostile = st.sampled_from(HOSTILE_PATH_VALUES)
        # Half real objects, so that the query and body get past the lookup.
        return draw(st.sampled_from(real) | hostile if real else hostile)

    return "/" + re.sub(r"<(\w+)>", value, template)


def send(client, method, url, pairs, *, body=None, content_type=None, htmx=False, bearer=None):
    """One request as a browser or an agent would send it, in a savepoint so
    that a database error cannot poison the test's transaction; any 5xx or
    exception fails the test."""
    query = urlencode(pairs, errors="surrogatepass")
    headers = {"HTTP_X_CSRFTOKEN": client.csrf_token}
    if htmx:
        headers |= {"HTTP_HX_REQUEST": "true", "HTTP_HX_CURRENT_URL": "http://testserver/"}
    if bearer:
        headers["HTTP_AUTHORIZATION"] = bearer
    if body is None and method not in ("GET", "HEAD"):
        # Parameters go as a form with the CSRF token, as a browser posts them.
        body = urlencode([*pairs, ("csrfmiddlewaretoken", client.csrf_token)], errors="surrogatepass")
        content_type = "application/x-www-form-urlencoded"
        url_with_query = url
    else:
        url_with_query = f"{url}?{query}" if query else url
    with transaction.atomic():
        response = client.generic(
            method,
            url_with_query,
            (body or "").encode("utf-8", "surrogatepass"),
            content_type=content_type or "application/octet-stream",
            **headers,
        )
        if response.streaming:
            b"".join(response.streaming_content)
    assert response.status_code < 500, (method, url_with_query[:300], response.status_code)
    return response


def _dumps(value) -> str:
    return json.dumps(value, allow_nan=True)


def _mutations(template):
    """Every path to a value in a JSON template."""
    if isinstance(template, dict):
        for key, item in template.items():
            yield (key,)
            for rest in _mutations(item):
                yield (key, *rest)
    elif isinstance(template, list):
        for index, item in enumerate(template):
            yield (index,)
            for rest in _mutations(item):
                yield (index, *rest)


def with_fresh_key(template: dict, key) -> dict:
    """A plan with its own submission key: a reused one is a 409 before anything is stored."""
    return {**template, "submission_key": f"walk-{key}"} if "submission_key" in template else template


def _replace(template, path, value):
    copy = json.loads(json.dumps(template))
    target = copy
    for part in path[:-1]:
        target = target[part]
    target[path[-1]] = value
    return copy


WALK_SETTINGS = hypothesis.settings(
    max_examples=500,
    deadline=None,
    derandomize=True,
    suppress_health_check=[HealthCheck.function_scoped_fixture, HealthCheck.too_slow, HealthCheck.data_too_large],
)
API_WALK_SETTINGS = hypothesis.settings(WALK_SETTINGS, max_examples=20)


def test_every_url_pattern_is_walked(world):
    """Nothing is left out: the console, the API and the admin site (served to
    staff; its forms are forms like any other), every placeholder filled with
    real objects. Only the admin's deletion pages are walked with GET alone,
    as any POST there confirms the deletion."""
    names = set(url_templates())
    assert {"workflows/<workflow_id>/steps/<step_key>/resolve", "api/v1/audit", "admin/<app_label>/"} <= names
    assert all(set(re.findall(r"<(\w+)>", t)) <= set(world) for t in names), "a URL names an unknown object"


def test_every_url_pattern_answers_real_and_hostile_path_values(world, people, admin_console, admin_api):
    """Each pattern with real objects, then with each hostile value in every
    placeholder, read and posted, with a forged cursor in the query: which
    every list refuses with exactly a 400."""
    bearer = f"Bearer {tokens.issue(people['admin'])}"
    lists = set(api_lists(admin_api) + CONSOLE_LISTS)
    for template in url_templates():
        fillings = [lambda name: quote(world[name][0], safe="")]
        if "<" in template:
            fillings += [lambda name, hostile=hostile: hostile for hostile in PATH_PROBES]
        for filling in fillings:
            url = "/" + re.sub(r"<(\w+)>", lambda match: filling(match.group(1)), template)
            for method in ("GET", "POST") if deletes_nothing(url) else ("GET",):
                admin_console.force_login(people["admin"])
                response = send(
                    admin_console,
                    method,
                    url,
                    [("cursor", FORGED_CURSORS["NUL id"]), ("q", "٣")],
                    bearer=bearer if url.startswith("/api/") else None,
                )
                if method == "GET" and url in lists:
                    assert response.status_code == 400, (url, response.status_code)


@WALK_SETTINGS
@given(data=st.data())
def test_every_page_and_form_answers_hostile_input_without_a_server_error(data, world, people, admin_console):
    """Generated requests to any pattern: hostile path values, parameters,
    methods, JSON, multipart and text bodies, with and without htmx."""
    admin_site = [t for t in url_templates() if t.startswith("admin/")]
    ours = [t for t in url_templates() if not t.startswith("admin/")]
    url = fill(data.draw(st.sampled_from(ours) | st.sampled_from(admin_site)), data.draw, world)
    method = data.draw(st.sampled_from(["GET", "POST"]) | st.sampled_from(HTTP_METHODS))
    assume(method in ("GET", "HEAD") or deletes_nothing(url))
    pairs = data.draw(params)
    if data.draw(st.booleans()):
        pairs.append(("cursor", data.draw(cursors)))
    body = content_type = None
    if method != "GET" and data.draw(st.booleans()):
        body = data.draw(st.sampled_from(RAW_JSON_BODIES) | json_values.map(_dumps))
        content_type = data.draw(st.sampled_from(["application/json", "multipart/form-data; boundary=b", "text/plain"]))
    admin_console.force_login(people["admin"])
    bearer = f"Bearer {tokens.issue(people['admin'])}" if url.startswith("/api/") else None
    send(
        admin_console,
        method,
        url,
        pairs,
        body=body,
        content_type=content_type,
        htmx=data.draw(st.booleans()),
        bearer=bearer,
    )


def test_every_api_operation_answers_every_known_hostile_value(world, api_operations, people, admin_console):
    """Each operation on real objects: each known hostile value in each query
    parameter it reads, each raw hostile body, and each hostile JSON value in
    each place of a valid body of its own."""
    bearer = f"Bearer {tokens.issue(people['admin'])}"
    for path, method, spec in api_operations:
        url = "/" + re.sub(r"\{(\w+)\}", lambda match: world[match.group(1)][0], path.removeprefix("/"))
        for name in [p["name"] for p in spec.get("parameters", []) if p["in"] == "query"]:
            for value in NASTY_TEXT:
                send(admin_console, method, url, [(name, value)], bearer=bearer)
        if "requestBody" not in spec:
            continue
        template = next(t for suffix, t in TEMPLATES.items() if path.endswith(suffix))
        bodies = RAW_JSON_BODIES + [
            _dumps(_replace(with_fresh_key(template, f"{n}-{m}"), where, leaf))
            for n, where in enumerate(_mutations(template))
            for m, leaf in enumerate(NASTY_JSON_LEAVES)
        ]
        for body in bodies:
            send(admin_console, method, url, [], body=body, content_type="application/json", bearer=bearer)


def test_every_api_operation_answers_hostile_input_without_a_server_error(world, api_operations, people, admin_console):
    """Each operation of the published schema in turn (so that each gets its
    share of examples), with its own parameters and a valid body of its own
    with one value swapped for a hostile one (so the input gets past the
    parser into the operation), or raw hostile JSON, or a form."""
    bearer = f"Bearer {tokens.issue(people['admin'])}"
    for path, method, spec in api_operations:
        names = [p["name"] for p in spec.get("parameters", []) if p["in"] == "query"]
        template = next((t for suffix, t in TEMPLATES.items() if path.endswith(suffix)), None)

        @API_WALK_SETTINGS
        @given(data=st.data())
        def walk(data):
            url = fill(re.sub(r"\{(\w+)\}", r"<\1>", path.removeprefix("/")), data.draw, world)
            keys = data.draw(st.lists(st.sampled_from(names or PARAM_NAMES), max_size=4))
            pairs = [(key, data.draw(cursors if key == "cursor" else query_values)) for key in keys]
            body = None
            if "requestBody" in spec:
                choice = data.draw(st.sampled_from(["mutated", "raw", "form"]))
                if choice == "mutated":
                    valid = with_fresh_key(template, data.draw(st.uuids()))
                    where = data.draw(st.sampled_from(list(_mutations(valid))))
                    body = _dumps(_replace(valid, where, data.draw(json_values)))
                elif choice == "raw":
                    body = data.draw(st.sampled_from(RAW_JSON_BODIES))
            send(
                admin_console,
                method,
                url,
                pairs,
                body=body,
                content_type="application/json" if body else None,
                bearer=bearer,
            )

        walk()


@pytest.fixture
def api_operations(admin_console):
    schema = admin_console.get("/api/v1/openapi.json").json()
    operations = [
        (path, method.upper(), spec) for path, methods in schema["paths"].items() for method, spec in methods.items()
    ]
    assert len(operations) >= 15
    return operations
