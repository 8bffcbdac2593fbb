"""Clients that decide on what they have just read.

Every decision names what its decider saw (revision, plan hash, preview and
results digests). A test that is not about that reads the object right
before deciding, as the console's page or an API client does, and sends
what it read: these clients fill in whichever of those fields a decision
leaves out, once the plan's previews are taken (`previews_taken`). A test
about stale or missing fields sends its own (a field it sets is never
replaced, and a decision naming the previews it was shown finds them as they
stand) or posts with a plain client.
"""

from __future__ import annotations

import re
import time

from django.core import signing
from django.test import Client as DjangoClient
from django.test.client import MULTIPART_CONTENT

from tests.support import processes
from workflows.engine import previews
from workflows.models import Compensation, Step, Workflow
from workflows.operations import compensation, links
from workflows.operations.deciding import Seen
from workflows.states import PreviewState

PLAN = re.compile(
    r"/workflows/(?P<id>[0-9a-f-]{36})/(?:(?P<revise>revise)|steps/(?P<gate>[^/]+)/(?:approve|reject)"
    r"|(?:approve|reject))/?$"
)
UNDO = re.compile(r"/compensations/(?P<id>[0-9a-f-]{36})/(?:authorize|decline)/?$")
LINK = re.compile(r"/review/link/(?P<token>[^/]+)/?$")


def previews_taken(workflow_id, timeout: float = 60.0) -> None:
    """The plan's previews, taken before a reviewer reads it, as a worker
    takes them after submission: while a worker of this test runs, wait for
    those it is taking; with none running, take them here. A decision binds
    the previews it was shown, and a step whose preview carries its request
    is not approved before that preview exists."""
    if not processes.RUNNING:
        previews.compute(workflow_id)
        return
    deadline = time.monotonic() + timeout
    while Step.objects.filter(workflow_id=workflow_id, lane=0, preview_state=PreviewState.PENDING).exists():
        if time.monotonic() > deadline:
            return
        time.sleep(0.05)


def as_read(path: str, *, previews_first: bool = True) -> dict:
    """The fields a decision at `path` names, as the object stands now
    ({} for a path that is no decision, or an object that does not exist),
    its previews taken first unless the caller names what it was shown."""
    found = PLAN.search(path)
    if found:
        if previews_first:
            previews_taken(found["id"])
        try:
            seen = Seen.current(found["id"], gate_step=found["gate"])
        except Step.DoesNotExist:  # no such step: the decision answers for itself
            seen = Seen.current(found["id"])
        except Workflow.DoesNotExist:
            return {}
        if found["revise"]:
            return {"revision": seen.revision}
        fields = {"revision": seen.revision, "plan_hash": seen.plan_hash, "preview_digests": seen.preview_digests}
        if found["gate"]:
            fields["results_digest"] = seen.results_digest
        return fields
    found = UNDO.search(path)
    if found:
        comp = Compensation.objects.filter(pk=found["id"]).first()
        return {"plan_hash": compensation.current_hash(comp)} if comp is not None else {}
    return {}


def json_body(path: str, body: dict) -> dict:
    """An API decision's body with what it left out filled in as read."""
    if not isinstance(body, dict):
        return body
    fields = as_read(path, previews_first="preview_digests" not in body)
    if not fields:
        return body
    if "/steps/" in path or not path.rstrip("/").endswith("/approve") or "preview_digests" in body:
        fields.pop("preview_digests", None)
    return {**fields, **body}


def form_data(path: str, data: dict | None) -> dict:
    """A console decision's form with the hidden fields its page carries."""
    data = dict(data or {})
    link = LINK.search(path)
    if link:
        return _link_form(link["token"], data)
    fields = as_read(path, previews_first="previews_shown" not in data)
    if not fields:
        return data
    digests = fields.pop("preview_digests", None)
    for name, value in fields.items():
        data.setdefault(name, value)
    if digests is not None and "previews_shown" not in data and "/steps/" not in path:
        data["previews_shown"] = "1"
        data["preview"] = [f"{key}={digest}" for key, digest in digests.items()]
    return data


def _link_form(token: str, data: dict) -> dict:
    """A review link's confirmation form: its token binds the revision and
    hash, and its page carries the previews it showed."""
    try:
        claims = signing.loads(token, salt=links.SALT)
    except signing.BadSignature:
        return data
    if (
        "previews_shown" in data
        or not isinstance(claims, dict)
        or not PLAN.search(f"/workflows/{claims.get('w')}/approve")
    ):
        return data
    digests = as_read(f"/workflows/{claims['w']}/approve").get("preview_digests") or {}
    return {**data, "previews_shown": "1", "preview": [f"{key}={digest}" for key, digest in digests.items()]}


class Client(DjangoClient):
    """The test client, whose console and API decisions carry what was read."""

    def post(self, path, data=None, content_type=MULTIPART_CONTENT, *args, **kwargs):
        path = str(path)
        if path.startswith("/api/v1/") and content_type == "application/json" and isinstance(data, dict):
            data = json_body(path.removeprefix("/api/v1"), data)
        elif (data is None or isinstance(data, dict)) and content_type == MULTIPART_CONTENT:
            data = form_data(path, data)
        return super().post(path, data, content_type, *args, **kwargs)
