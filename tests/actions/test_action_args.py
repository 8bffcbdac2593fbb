"""Every action declares its arguments as a model: plans are checked against
it strictly at submission, with a field path for each error, and stored,
hashed and performed exactly as submitted. Clients read the models from
GET /api/v1/actions and the OpenAPI schema."""

import json
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Annotated, Literal

import jsonschema_rs
import pytest
from django_q.models import OrmQ
from pydantic import Field

from tests.support import deciding as decide
from tests.support.personas import PERSONAS
from tests.support.plans import ticket_plan
from tests.support.running import wait_for_status
from workflows import actions
from workflows.actions import ArgsModel, FromRef, SecretRef
from workflows.actions.webhooks import RESERVED_HEADERS
from workflows.audit import secrets
from workflows.db import canonical_json, sha256_hex
from workflows.models import AuditEvent, Step, Workflow
from workflows.operations import plans


class Money(ArgsModel):
    value: Annotated[int, Field(ge=1)]
    currency: Literal["EUR", "USD"]


@actions.register
class Refund(actions.Action):
    """A team's own action, as a plugin declares one: an enum, a nested
    object, a list with a length, and fields that take references."""

    name = "test.refund"
    compensation = None

    class Args(ArgsModel):
        order: FromRef[str]
        amount: Money
        reason: Literal["damaged", "late", "other"] = "other"
        notes: list[Annotated[str, Field(max_length=20)]] = Field(default_factory=list, max_length=2)
        api_token: SecretRef[str] | None = None

    def perform(self, args, operation_key):
        return actions.Outcome(result={})

    def preview(self, args):
        return actions.Preview(summary=f"refund order {args['order']}")


@actions.register
class Touch(actions.Action):
    """An action that keeps the default arguments (any object) and no preview."""

    name = "test.touch"

    def perform(self, args, operation_key):
        return actions.Outcome(result={})


def one_step(action, args, **step):
    return {"name": "n", "submission_key": "k", "steps": [{"key": "s", "action": action, "args": args, **step}]}


def refused(api, plan) -> dict[str, str]:
    answer = api["agent"].post("/workflows", plan)
    assert answer.status_code == 400, answer.content
    error = answer.json()["error"]
    assert error["code"] == "invalid"
    assert not Workflow.objects.exists()
    return error["fields"]


MAIL = {"to": "ops@example.com", "subject": "s", "body": "b"}
HOOK = {"url": "https://hooks.example.com/in"}
REFUND = {"order": "A-1", "amount": {"value": 5, "currency": "EUR"}}

BAD_ARGS = {
    # ticket.create
    "title missing": ("ticket.create", {"body": "b"}, "title", "required"),
    "title a number, not coerced": ("ticket.create", {"title": 5}, "title", "valid string"),
    "title only blanks": ("ticket.create", {"title": " \t "}, "title", "only blanks"),
    "title too long": ("ticket.create", {"title": "x" * 201}, "title", "at most 200"),
    "body null": ("ticket.create", {"title": "t", "body": None}, "body", "valid string"),
    "unknown key": ("ticket.create", {"title": "t", "priority": "high"}, "priority", "Unknown argument"),
    # ticket.comment and ticket.close
    "ticket id as text, not coerced": (
        "ticket.comment",
        {"ticket_id": "42", "body": "b"},
        "ticket_id",
        "valid integer",
    ),
    "ticket id a boolean": ("ticket.comment", {"ticket_id": True, "body": "b"}, "ticket_id", "valid integer"),
    "ticket id zero": ("ticket.comment", {"ticket_id": 0, "body": "b"}, "ticket_id", "greater than or equal to 1"),
    "comment missing": ("ticket.comment", {"ticket_id": 4}, "body", "required"),
    "ticket id a float": ("ticket.close", {"ticket_id": 4.0}, "ticket_id", "valid integer"),
    "ticket id beyond the desk's": ("ticket.close", {"ticket_id": 10**18}, "ticket_id", "less than or equal"),
    "malformed $from": ("ticket.close", {"ticket_id": {"$from": 7}}, "ticket_id", '{"$from": "<step key>'),
    "malformed $secret": ("ticket.create", {"title": {"$secret": "lower"}}, "title", secrets.MALFORMED),
    # http.post
    "url of another scheme": ("http.post", {"url": "ftp://hooks.example.com/in"}, "url", "'http' or 'https'"),
    "url not a URL": ("http.post", {"url": "hooks example com"}, "url", "valid URL"),
    "url missing": ("http.post", {"json": {}}, "url", "required"),
    "json a string": ("http.post", {**HOOK, "json": "text"}, "json", "object or array"),
    "header on two lines": (
        "http.post",
        {**HOOK, "headers": {"X-Note": "a\r\nX-Evil: 1"}},
        "headers.X-Note",
        "one line",
    ),
    "header name not a token": (
        "http.post",
        {**HOOK, "headers": {"X Note": "a"}},
        "headers.X Note",
        "Not a header name",
    ),
    "header given twice": ("http.post", {**HOOK, "headers": {"X-Note": "a", "x-note": "b"}}, "headers", "given twice"),
    "declaration as text": (
        "http.post",
        {**HOOK, "receiver_honours_idempotency_key": "true"},
        "receiver_honours_idempotency_key",
        "valid boolean",
    ),
    # email.send
    "bad address": ("email.send", {**MAIL, "to": "ops.example.com"}, "to", "Not an email address"),
    "bad address in a list": (
        "email.send",
        {**MAIL, "to": ["ops@example.com", "ops@"]},
        "to.1",
        "Not an email address",
    ),
    "bad copy": ("email.send", {**MAIL, "cc": "<ops@example.com>"}, "cc", "Not an email address"),
    "no recipient": ("email.send", {**MAIL, "to": []}, "to", "at least 1"),
    "subject on two lines": ("email.send", {**MAIL, "subject": "Hi\nBcc: all@example.com"}, "subject", "one line"),
    "bcc not an argument": ("email.send", {**MAIL, "bcc": "all@example.com"}, "bcc", "Unknown argument"),
    # a plugin's model: enum, nested object, list length
    "enum": ("test.refund", {**REFUND, "reason": "bored"}, "reason", "'damaged', 'late' or 'other'"),
    "nested object": (
        "test.refund",
        {**REFUND, "amount": {"value": 5, "currency": "GBP"}},
        "amount.currency",
        "'EUR' or 'USD'",
    ),
    "nested object's number as text": (
        "test.refund",
        {**REFUND, "amount": {"value": "5", "currency": "EUR"}},
        "amount.value",
        "valid integer",
    ),
    "nested unknown key": (
        "test.refund",
        {**REFUND, "amount": {"value": 5, "currency": "EUR", "x": 1}},
        "amount.x",
        "Unknown key",
    ),
    "list too long": ("test.refund", {**REFUND, "notes": ["a", "b", "c"]}, "notes", "at most 2"),
    "list item too long": ("test.refund", {**REFUND, "notes": ["a", "x" * 21]}, "notes.1", "at most 20"),
}


@pytest.mark.parametrize("case", BAD_ARGS, ids=list(BAD_ARGS))
def test_bad_args_of_every_action_are_refused_with_their_field_path(api, case):
    action, args, field, says = BAD_ARGS[case]
    fields = refused(api, one_step(action, args))
    assert says in fields[f"steps.0.args.{field}"], fields


@pytest.mark.parametrize("name", [*RESERVED_HEADERS, "idempotency-key", "HOST", "TraceParent", "cookie"])
def test_http_post_refuses_reserved_headers_whatever_their_case(api, name):
    fields = refused(api, one_step("http.post", {**HOOK, "headers": {"X-Ok": "1", name: "x"}}))
    assert list(fields) == [f"steps.0.args.headers.{name}"]
    assert "Set by the console" in fields[f"steps.0.args.headers.{name}"]


REFERENCE_CASES = [
    # (action, args, where a reference is refused, or None when it is taken)
    ("ticket.create", {"title": {"$from": "first.result.title"}, "body": {"$secret": "TOKEN"}}, None),
    ("ticket.comment", {"ticket_id": {"$from": "first.result.id"}, "body": {"$from": "first.result.text"}}, None),
    ("http.post", {"url": {"$from": "first.result.url"}, "json": {"$from": "first.result.body"}}, None),
    ("http.post", {**HOOK, "headers": {"X-Token": {"$secret": "TOKEN"}}}, None),
    ("email.send", {**MAIL, "subject": {"$from": "first.result.title"}, "body": {"$secret": "TOKEN"}}, None),
    ("test.refund", {**REFUND, "order": {"$from": "first.result.id"}, "api_token": {"$secret": "TOKEN"}}, None),
    ("http.post", {"url": {"$secret": "TOKEN"}}, ("url", "$secret")),
    ("http.post", {**HOOK, "headers": {"X-Token": {"$from": "first.result.token"}}}, ("headers.X-Token", "$from")),
    (
        "http.post",
        {**HOOK, "receiver_honours_idempotency_key": {"$from": "first.result.ok"}},
        ("receiver_honours_idempotency_key", "$from"),
    ),
    ("email.send", {**MAIL, "to": {"$from": "first.result.email"}}, ("to", "$from")),
    ("email.send", {**MAIL, "cc": {"$secret": "TOKEN"}}, ("cc", "$secret")),
    ("test.refund", {**REFUND, "order": {"$secret": "TOKEN"}}, ("order", "$secret")),
    ("test.refund", {**REFUND, "api_token": {"$from": "first.result.token"}}, ("api_token", "$from")),
    ("test.refund", {**REFUND, "amount": {"$from": "first.result.amount"}}, ("amount", "$from")),
]


@pytest.mark.parametrize(("action", "args", "refusal"), REFERENCE_CASES)
def test_references_are_taken_only_by_fields_that_declare_them(api, settings, action, args, refusal):
    desk = secrets.host_of(settings.TICKET_DESK_URL)
    # email.send's hosts are its recipients' domains (MAIL goes to ops@example.com).
    settings.SECRETS_POLICY = {"TOKEN": {"actions": [action], "hosts": ["hooks.example.com", desk, "example.com"]}}
    plan = {
        "name": "n",
        "submission_key": "k",
        "steps": [{"key": "first", "action": "noop", "args": {}}, {"key": "second", "action": action, "args": args}],
    }
    if refusal is None:
        answer = api["agent"].post("/workflows", plan)
        assert answer.status_code == 201, answer.json()
        return
    field, says = refusal
    fields = refused(api, plan)
    assert fields[f"steps.1.args.{field}"] == f"This field does not take a {says} reference.", fields


def test_only_actions_without_a_model_take_keys_they_do_not_name(api):
    args = {"title": "t", "anything": [1, {"nested": True}], "n": "1"}
    fields = refused(api, one_step("ticket.create", args))
    assert list(fields) == ["steps.0.args.anything", "steps.0.args.n"]
    for action in ("noop", "test.touch"):
        answer = api["agent"].post("/workflows", {**one_step(action, args), "submission_key": action})
        assert answer.status_code == 201, answer.json()
        assert Step.objects.get(action=action).args == args


def test_every_error_of_a_plan_is_reported_at_once_and_nothing_is_stored(api):
    plan = ticket_plan()
    plan["steps"][0]["args"] = {"title": "", "extra": 1}
    plan["steps"][1]["args"]["ticket_id"] = "1"
    plan["steps"][2]["args"] = {}
    plan["steps"][0]["compensation"] = {"action": "ticket.close", "args": {"ticket_id": "open"}}
    before = (AuditEvent.objects.count(), OrmQ.objects.count())
    fields = refused(api, plan)
    assert set(fields) == {
        "steps.0.args.title",
        "steps.0.args.extra",
        "steps.1.args.ticket_id",
        "steps.2.args.ticket_id",
        "steps.0.compensation.args.ticket_id",
    }
    assert fields["steps.2.args.ticket_id"] == "This field is required."
    assert (Workflow.objects.count(), Step.objects.count()) == (0, 0)
    assert (AuditEvent.objects.count(), OrmQ.objects.count()) == before


def test_raw_args_are_stored_and_hashed_as_submitted_never_as_the_model_reads_them(api, people):
    """The model would add defaults (`json`, `headers`, the declaration, a
    body) and normalise the URL with a trailing slash: none of it is kept."""
    steps = [
        {"key": "hook", "action": "http.post", "args": {"url": "https://hooks.example.com"}},
        {"key": "open", "action": "ticket.create", "args": {"title": "t"}},
        {"key": "mail", "action": "email.send", "args": {"to": "ops@example.com", "subject": "s", "body": ""}},
    ]
    answer = api["agent"].post("/workflows", {"name": "raw", "submission_key": "raw", "steps": steps})
    assert answer.status_code == 201, answer.json()
    stored = {step.key: step.args for step in Step.objects.all()}
    assert stored == {step["key"]: step["args"] for step in steps}
    workflow = Workflow.objects.get()
    raw_plan = [{"key": s["key"], "action": s["action"], "args": s["args"], "compensation": None} for s in steps]
    assert workflow.plan_hash == sha256_hex(canonical_json(raw_plan))
    assert workflow.plan == raw_plan


class Receiver(BaseHTTPRequestHandler):
    """A webhook receiver that records what it was sent."""

    received: list[dict] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers.get("Content-Length") or 0))
        Receiver.received.append({"headers": dict(self.headers), "body": json.loads(body)})
        payload = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(payload)))
        self.end_headers()
        self.wfile.write(payload)

    def log_message(self, *args):
        pass


@pytest.fixture
def receiver():
    Receiver.received = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Receiver)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    yield f"http://127.0.0.1:{server.server_port}"
    server.shutdown()
    server.server_close()


def test_http_post_sends_its_headers_with_secrets_resolved_by_the_worker(people, settings, start_worker, receiver):
    token = "hook-5Tq8-Wn3r-Yk7p"
    policy = {"HOOK_TOKEN": {"actions": ["http.post"], "hosts": ["127.0.0.1"]}}
    settings.SECRETS_POLICY = policy
    args = {
        "url": f"{receiver}/in",
        "json": {"event": "deployed"},
        "headers": {"X-Event": "deploy", "X-Hook-Token": {"$secret": "HOOK_TOKEN"}},
    }
    workflow = plans.submit(people["agent"], one_step("http.post", args)).workflow
    start_worker(SECRET_HOOK_TOKEN=token, SECRETS_POLICY=json.dumps(policy))
    decide.approve(workflow, by=people["reviewer"])
    wait_for_status(workflow.pk, "COMPLETE")
    step = workflow.steps.get()
    [request] = Receiver.received
    assert request["headers"]["X-Event"] == "deploy"
    assert request["headers"]["X-Hook-Token"] == token
    assert request["headers"]["Idempotency-Key"] == step.operation_key
    assert request["body"] == {"event": "deployed"}
    assert step.args == args  # the reference is what is stored
    assert step.result == {"status": 200, "body": {"ok": True}}


FLAGS = {
    "name",
    "idempotent",
    "can_lookup",
    "destructive",
    "irreversible",
    "compensation",
    "has_preview",
    "args_schema",
}


def test_every_role_lists_the_actions_with_their_flags_and_args_schema(api, client):
    assert client.get("/api/v1/actions").status_code == 401
    answers = [api[persona].get("/actions") for persona in PERSONAS]
    assert [answer.status_code for answer in answers] == [200] * len(PERSONAS)
    items = answers[0].json()["items"]
    assert all(answer.json()["items"] == items for answer in answers)
    assert [item["name"] for item in items] == actions.names()
    assert all(set(item) == FLAGS for item in items)
    listed = {item["name"]: item for item in items}
    assert {
        key: value for key, value in listed["ticket.create"].items() if key not in ("args_schema", "has_preview")
    } == {
        "name": "ticket.create",
        "idempotent": True,
        "can_lookup": True,
        "destructive": False,
        "irreversible": False,
        "compensation": "ticket.close",
    }
    assert (listed["email.send"]["irreversible"], listed["email.send"]["compensation"]) == (True, None)
    assert (listed["test.refund"]["has_preview"], listed["test.touch"]["has_preview"]) == (True, False)
    for name, item in listed.items():
        assert item["args_schema"] == {**actions.get(name).Args.model_json_schema(), "title": f"{name} args"}


SCHEMA_CASES = [
    ("ticket.create", {"title": "t", "body": "b"}, True),
    ("ticket.create", {"title": {"$from": "open.result.title"}, "body": {"$secret": "TOKEN"}}, True),
    ("ticket.create", {"body": "b"}, False),
    ("ticket.create", {"title": "t", "priority": 1}, False),
    ("ticket.comment", {"ticket_id": "4", "body": "b"}, False),
    ("http.post", {**HOOK, "headers": {"X-Token": {"$secret": "TOKEN"}}}, True),
    ("http.post", {**HOOK, "headers": {"X-Token": {"$secret": "lower"}}}, False),
    ("http.post", {**HOOK, "headers": {"X Token": "a"}}, False),
    ("http.post", {**HOOK, "receiver_honours_idempotency_key": "yes"}, False),
    ("email.send", {**MAIL, "to": ["a@example.com", "b@example.com"]}, True),
    ("email.send", {**MAIL, "to": {"$from": "a.result.to"}}, False),
    ("test.refund", REFUND, True),
    ("test.refund", {**REFUND, "amount": {"value": 5, "currency": "GBP"}}, False),
    ("noop", {"anything": 1}, True),
]


@pytest.mark.parametrize(("action", "args", "valid"), SCHEMA_CASES)
def test_the_listed_schema_says_what_submission_accepts(api, action, args, valid):
    """A client that checks args against the published schema before
    submitting gets the answer the console would give."""
    listed = {item["name"]: item for item in api["agent"].get("/actions").json()["items"]}
    assert jsonschema_rs.validator_for(listed[action]["args_schema"]).is_valid(args) is valid
    assert (actions.field_errors(actions.get(action).Args, args, "args") == {}) is valid


def _refs(value):
    if isinstance(value, dict):
        if "$ref" in value:
            yield value["$ref"]
        for item in value.values():
            yield from _refs(item)
    elif isinstance(value, list):
        for item in value:
            yield from _refs(item)


def test_the_openapi_schema_references_the_args_schema_of_every_action(api):
    schema = api["agent"].get("/openapi.json").json()
    components = schema["components"]["schemas"]
    for name in actions.names():
        assert components[f"{name}.args"]["title"] == f"{name} args"
    assert components["test.refund.args.Money"]["properties"]["currency"]["enum"] == ["EUR", "USD"]
    assert components["test.refund.args"]["properties"]["amount"] == {
        "$ref": "#/components/schemas/test.refund.args.Money"
    }
    for holder in ("StepIn", "CompensationIn"):
        args = components[holder]["properties"]["args"]
        assert args["anyOf"] == [{"$ref": f"#/components/schemas/{name}.args"} for name in actions.names()]
        assert "GET /api/v1/actions" in args["description"]
    assert "/api/v1/actions" in schema["paths"]
    for ref in set(_refs(schema)):
        assert ref.removeprefix("#/components/schemas/") in components, ref
