"""What a Slack button carries: the decision it makes and what the decider
saw (docs/guides/slack-admins.md#button-values), so that a click decides
exactly as the console's form would, through the same operations and
checks (`workflows.operations.deciding`).

A button's `value` is compact JSON, at most Slack's 2,000 characters:

- a plan (`action_id` `approve` / `reject`):
  `{"v": 1, "w": WORKFLOW_ID, "r": REVISION, "h": PLAN_HASH, "p": PREVIEWS}`
  where PREVIEWS is the SHA-256 of the canonical JSON of the ready
  previews' `{step key: digest}` (`previews_digest`);
- a gate (`gate_approve` / `gate_reject`):
  `{"v": 1, "w": WORKFLOW_ID, "s": STEP_KEY, "r": REVISION, "h": PLAN_HASH, "d": RESULTS_DIGEST}`;
- a compensation (`comp_authorize` / `comp_decline`):
  `{"v": 1, "c": COMPENSATION_ID, "h": COMPENSATION_PLAN_HASH}`.

`decision(action_id, value)` reads one back into a `Click`: which
operation, on what, and the `Seen` to pass it. The previews' digests are
the current ones when they still hash to PREVIEWS; otherwise the click is
refused as `preview_changed`, as a stale page's would be.
"""

from __future__ import annotations

import json
import uuid
from dataclasses import dataclass

from workflows.db import canonical_json, sha256_hex
from workflows.engine import gates
from workflows.errors import PreviewChanged
from workflows.models import Compensation, Step, Workflow
from workflows.operations import compensation
from workflows.operations.deciding import Seen
from workflows.states import PreviewState

VERSION = 1
APPROVE, REJECT = "approve", "reject"
GATE_APPROVE, GATE_REJECT = "gate_approve", "gate_reject"
COMP_AUTHORIZE, COMP_DECLINE = "comp_authorize", "comp_decline"
OPEN = "open"
# action_id → (what is decided, approving?)
ACTIONS = {
    APPROVE: ("plan", True),
    REJECT: ("plan", False),
    GATE_APPROVE: ("gate", True),
    GATE_REJECT: ("gate", False),
    COMP_AUTHORIZE: ("compensation", True),
    COMP_DECLINE: ("compensation", False),
}
MAX_VALUE = 2000


def previews_digest(digests: dict[str, str]) -> str:
    return sha256_hex(canonical_json(digests))


def _ready_digests(steps) -> dict[str, str]:
    return {step.key: step.preview_digest for step in steps if step.preview_state == PreviewState.READY}


def _dump(value: dict) -> str:
    text = json.dumps({"v": VERSION, **value}, separators=(",", ":"))
    if len(text) > MAX_VALUE:
        raise ValueError("a button value longer than Slack allows")
    return text


def plan_value(workflow: Workflow, steps: list[Step]) -> str:
    return _dump(
        {
            "w": str(workflow.pk),
            "r": workflow.revision,
            "h": workflow.plan_hash,
            "p": previews_digest(_ready_digests(s for s in steps if s.lane == 0)),
        }
    )


def gate_value(workflow: Workflow, step: Step) -> str:
    return _dump(
        {
            "w": str(workflow.pk),
            "s": step.key,
            "r": workflow.revision,
            "h": workflow.plan_hash,
            "d": gates.results_digest(step),
        }
    )


def compensation_value(comp: Compensation) -> str:
    return _dump({"c": str(comp.pk), "h": compensation.current_hash(comp)})


def parse_button_value(raw: str) -> dict:
    """The fields of a value this module wrote; ValueError for anything
    else (a click is untrusted input until its fields check out)."""
    if not isinstance(raw, str) or len(raw) > MAX_VALUE:
        raise ValueError("not a button value")
    value = json.loads(raw)
    if not isinstance(value, dict) or value.get("v") != VERSION:
        raise ValueError("not a button value of this version")
    if "c" in value:
        uuid.UUID(value["c"])
        _text(value, "h")
        return value
    uuid.UUID(value["w"])
    if not isinstance(value.get("r"), int) or isinstance(value.get("r"), bool):
        raise ValueError("r must be the revision number")
    _text(value, "h")
    _text(value, "s" if "s" in value else "p")
    if "s" in value:
        _text(value, "d")
    return value


def _text(value: dict, name: str) -> None:
    if not isinstance(value.get(name), str) or len(value[name]) > 200:
        raise ValueError(f"{name} must be text")


@dataclass(frozen=True)
class Click:
    kind: str  # "plan", "gate" or "compensation"
    approving: bool
    workflow_id: uuid.UUID | None
    step_key: str | None
    compensation_id: uuid.UUID | None
    seen: Seen


def decision(action_id: str, raw: str) -> Click:
    """What a decision button's click asks for (ValueError: not one of
    ours). PreviewChanged when the plan's previews are no longer those the
    message showed."""
    if action_id not in ACTIONS:
        raise ValueError(f"not a decision button: {action_id!r}")
    kind, approving = ACTIONS[action_id]
    value = parse_button_value(raw)
    if kind == "compensation":
        if "c" not in value:
            raise ValueError("a compensation's button names its compensation")
        return Click(kind, approving, None, None, uuid.UUID(value["c"]), Seen(plan_hash=value["h"]))
    if "c" in value or ("s" in value) != (kind == "gate"):
        raise ValueError("the button's value does not match its action")
    workflow_id = uuid.UUID(value["w"])
    if kind == "gate":
        seen = Seen(revision=value["r"], plan_hash=value["h"], results_digest=value["d"])
        return Click(kind, approving, workflow_id, value["s"], None, seen)
    current = _ready_digests(Step.objects.filter(workflow_id=workflow_id, lane=0))
    if previews_digest(current) != value["p"]:
        raise PreviewChanged(
            "The effect previews changed since this message showed them: "
            "look at the updated message, then decide again."
        )
    return Click(kind, approving, workflow_id, None, None, Seen(value["r"], value["h"], current))
