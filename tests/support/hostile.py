"""Hostile input: cursors no page gave out, every list that reads a cursor
(in the API's published schema and in the console), and plan bodies Python
accepts but JSON and the databases do not."""

import base64
import json
import re
from datetime import UTC, datetime, timedelta

from tests.support.plans import ticket_plan


def cursor_of(*values) -> str:
    return base64.urlsafe_b64encode(json.dumps(values).encode()).decode().rstrip("=")


ZERO_UUID = "00000000-0000-0000-0000-000000000000"
FORGED_CURSORS = {
    "garbage": "garbage!",
    "not base64 of JSON": base64.urlsafe_b64encode(b"\xff\xfe").decode(),
    "a JSON object": base64.urlsafe_b64encode(b'{"a": 1}').decode(),
    "non-UUID id": cursor_of("2024-01-01T00:00:00+00:00", "not-a-uuid"),
    "NUL id": cursor_of("2024-01-01T00:00:00+00:00", "\x00"),
    "time past the calendar in UTC": cursor_of("9999-12-31T23:59:59-23:59", ZERO_UUID),
    "time before the calendar in UTC": cursor_of("0001-01-01T00:00:00+23:59", ZERO_UUID),
    "naive time": cursor_of("2024-01-01T00:00:00", ZERO_UUID),
    "Arabic-Indic digit": cursor_of("٣"),
    "superscript digit": cursor_of("²"),
    "5,000 digits": cursor_of("9" * 5000),
    "beyond 64 bits": cursor_of("9" * 30),
    "negative": cursor_of("-1"),
    "NUL": cursor_of("\x00"),
}


# The console's lists that page with a cursor; `console_lists` checks that no other view reads one.
CONSOLE_LISTS = ["/", "/workflows/", "/dead-letters/", "/compensations/", "/audit/", "/jobs/", "/webhook-deliveries/"]


def api_lists(admin_api) -> list[str]:
    """Every API operation that reads a `cursor`, from the published schema."""
    schema = admin_api.get("/api/v1/openapi.json").json()
    return sorted(
        path
        for path, methods in schema["paths"].items()
        if any(p["name"] == "cursor" for p in methods.get("get", {}).get("parameters", []))
    )


def console_lists() -> list[str]:
    """Every console page whose view reads a cursor (itself, or through `list_page`)."""
    import inspect

    from workflows.web import urls

    return sorted(
        "/" + str(p.pattern)
        for p in urls.urlpatterns
        if re.search(r'"cursor"|list_page\(', inspect.getsource(p.callback))
    )


def plan_text(**replace) -> str:
    """A valid plan's JSON text with raw JSON spliced in for some values."""
    body = ticket_plan(key="hostile")
    markers = {}
    for index, (path, raw) in enumerate(replace.items()):
        marker = f"@@{index}@@"
        markers[f'"{marker}"'] = raw
        target = body
        *parents, last = path.split(".")
        for part in parents:
            target = target[int(part)] if part.isdigit() else target[part]
        target[int(last) if last.isdigit() else last] = marker
    text = json.dumps(body)
    for marker, raw in markers.items():
        text = text.replace(marker, raw)
    return text


HOSTILE_BODIES = {
    "NaN": (plan_text(**{"steps.0.args.title": "NaN"}), "finite"),
    "Infinity": (plan_text(**{"steps.0.args.title": "Infinity"}), "finite"),
    "-Infinity": (plan_text(**{"context": '{"x": -Infinity}'}), "finite"),
    "1e999": (plan_text(**{"steps.0.args.body": "1e999"}), "finite"),
    "lone surrogate": (plan_text(**{"steps.0.args.title": '"\\ud800"'}), "steps.0.args.title"),
    "lone surrogate in a key": (plan_text(**{"context": '{"\\udfff": 1}'}), "key"),
    "NUL": (plan_text(**{"steps.0.args.body": '"a\\u0000b"'}), "steps.0.args.body"),
    "NUL in the name": (plan_text(**{"name": '"\\u0000"'}), "name"),
    "huge deadline": (plan_text(**{"deadline_seconds": "9" * 30}), "64-bit"),
    "huge argument": (plan_text(**{"steps.0.args.body": str(2**64)}), "64-bit"),
    "5,000-digit argument": (plan_text(**{"steps.0.args.body": "9" * 5000}), "64-bit"),
    "huge negative": (plan_text(**{"context": f'{{"n": -{2**63 + 1}}}'}), "64-bit"),
    "duplicate key": (plan_text(**{"context": '{"a": 1, "a": 2}'}), "twice"),
    "array": ("[]", "JSON object"),
    "string": ('"x"', "JSON object"),
    "number": ("1", "JSON object"),
    "null": ("null", "JSON object"),
    "not UTF-8": ("\udcff", "UTF-8"),
    "not JSON": ("{", "not valid JSON"),
}


# A valid body for each API operation that takes one, by the end of its path:
# the walks swap one value at a time for a hostile one, so that the input
# gets past the parser into the operation.
# Every field a dead-letter filter reads (bulk replay and reconcile).
DEAD_LETTER_FILTER = {
    "workflow": "00000000-0000-0000-0000-000000000000",
    "status": "OPEN",
    "action": "ticket.create",
    "failure_class": "TRANSIENT",
    "older_than": "1d",
    "team": "default",
    "ids": ["00000000-0000-0000-0000-000000000000"],
    "job": "00000000-0000-0000-0000-000000000000",
}
TEMPLATES = {
    "/workflows": {
        "name": "walk",
        "submission_key": "walk",
        "deadline_seconds": 60,
        "context": {"prompt": "p"},
        "steps": [
            {
                "key": "open",
                "action": "ticket.create",
                "args": {"title": "t", "body": "b"},
                "compensation": {"action": "ticket.close", "args": {"ticket_id": {"$from": "open.result.id"}}},
            }
        ],
    },
    "/decisions": {
        "decisions": [
            {
                "workflow": "00000000-0000-0000-0000-000000000000",
                "decision": "approve",
                "revision": 1,
                "plan_hash": "a" * 64,
                "preview_digests": {"open": "a" * 64},
                "comment": "ok",
            }
        ]
    },
    "/approve": {"comment": "ok"},
    "/cancel": {"reason": "r"},
    "/revise": {"steps": [{"key": "open", "args": {"title": "t", "body": "b"}}], "comment": "c"},
    "/claim": {},
    "/release": {},
    "/assign": {"to": "reviewer2"},
    # A valid delegation (admin away until tomorrow), so that each swapped value reaches the operation.
    "/me/delegation": {
        "to": "reviewer2",
        "until": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
        "note": "n",
    },
    "/resolve": {"decision": "happened", "external_ref": "r", "result": {"a": 1}, "reason": "r"},
    "/resolve/confirm": {"reason": "r", "resolution_digest": "d"},
    # Before "/replay": the first suffix that matches is taken.
    "/dead-letters/replay": {
        "filter": DEAD_LETTER_FILTER,
        "only": "safe",
        "dry_run": True,
        "reason": "r",
    },
    "/dead-letters/reconcile": {
        "filter": DEAD_LETTER_FILTER,
        "dry_run": True,
    },
    "/verify": {"workflow": "00000000-0000-0000-0000-000000000000"},
    "/reject": {"comment": "no"},
    "/replay": {"reason": "r"},
    "/discard": {"reason": "r"},
    "/compensations": {"reason": "r", "steps": ["open"]},
    "/authorize": {"reason": "r"},
    "/decline": {"reason": "r"},
    "/policy": {
        "enabled": True,
        "risk": "HIGH",
        "approvals_required": 2,
        "approval_ttl_seconds": 600,
        "max_attempts": 3,
        "max_in_flight": 4,
        "rate_per_second": 2.5,
        "reason": "r",
        "version": 1,
    },
    # A proposed version of a team's Cedar policy set, and a plan to evaluate against the live sets.
    "/versions": {
        "text": '@id("reads")\npermit(principal, action == Action::"auto_approve", resource);\n',
        "reason": "r",
    },
    "/policies/evaluate": {
        "plan": {"steps": [{"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}}]},
        "agent": "agent",
    },
    # A valid standing grant, so that each swapped value reaches the operation.
    "/grants": {
        "agent": "agent",
        "action": "ticket.create",
        "when": "context.hour < 24",
        "max_uses": 2,
        "until": (datetime.now(UTC) + timedelta(days=1)).isoformat(),
    },
    "/grants/{grant_id}": {"reason": "r"},
    "/webhooks": {"url": "https://hooks.example.com/in", "description": "d", "enabled": True},
    "/webhooks/{endpoint_id}": {"url": "https://hooks.example.com/in", "description": "d", "enabled": False},
}
