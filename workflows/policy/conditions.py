"""A standing grant's condition: one Cedar expression over the step
(docs/explanation/policies.md#standing-grants).

The condition is checked as the body of a permit of `auto_approve`,
against the published schema, so it reads exactly what a team's policies
read (`resource.action`, `resource.args`, `context.hour`, ...) and a bad
one is refused with Cedar's own message. It must stay one expression: a
text that closes the `when` and adds a clause or a policy of its own is
refused, never run.

A condition holds on a step when Cedar permits that permit for the step.
One that reads an argument whose value is not known before the step runs
(`$from`, `$secret`, `$decision`) proves nothing about it and does not
hold: a person decides that step.
"""

from __future__ import annotations

import json
from datetime import datetime
from functools import lru_cache

import cedarpy

from workflows.errors import DomainError
from workflows.policy import evaluation
from workflows.policy.text import PolicyTextInvalid, check

MAX_CONDITION_CHARS = 4_000
_HEAD = '@id("grant")\npermit(principal, action == Action::"auto_approve", resource)\nwhen {\n'
_HEAD_LINES = _HEAD.count("\n")


class ConditionInvalid(DomainError):
    code = "invalid"

    def __init__(self, message: str):
        super().__init__(f"The condition is not valid: {message}", fields={"when": message})


def _policy_text(condition: str) -> str:
    return f"{_HEAD}{condition}\n}};\n"


@lru_cache(maxsize=256)
def _checked(condition: str) -> str:
    """The condition's permit in Cedar's JSON form (as text: cached), or
    ConditionInvalid with Cedar's message and the condition's line."""
    if "\x00" in condition:
        raise ConditionInvalid("NUL characters are refused.")
    try:
        policies = check(_policy_text(condition))
    except PolicyTextInvalid as exc:
        message = str(exc).split(": ", 1)[1] if exc.line is not None else str(exc)
        line = (exc.line or 0) - _HEAD_LINES
        where = f"line {line}: " if 1 <= line <= condition.count("\n") + 1 else ""
        raise ConditionInvalid(f"{where}{message}") from None
    conditions = policies[0].est.get("conditions", []) if len(policies) == 1 else []
    if len(policies) != 1 or [c["kind"] for c in conditions] != ["when"]:
        raise ConditionInvalid("write one Cedar expression (what goes inside `when { ... }`), nothing around it.")
    return json.dumps(policies[0].est)


def check_condition(condition) -> None:
    """ConditionInvalid unless `condition` is one Cedar expression the schema accepts."""
    if not isinstance(condition, str) or not condition.strip():
        raise ConditionInvalid("Required: one Cedar expression over the step, such as `context.hour < 18`.")
    if len(condition) > MAX_CONDITION_CHARS:
        raise ConditionInvalid(f"at most {MAX_CONDITION_CHARS} characters.")
    _checked(condition)


def holding(
    conditions: dict[str, str],
    step: dict,
    *,
    agent: str,
    team: str,
    now: datetime,
    steps_in_plan: int = 1,
    workflow: str = "plan",
) -> set[str]:
    """Which of `conditions` (`{grant id: condition}`) hold on `step` (a
    plan's step: key, action, args) submitted by `agent` of `team`. A
    condition the schema no longer accepts, one that errors on the step and
    one that reads an unknown argument hold on nothing."""
    if not conditions:
        return set()
    entity, unknown = evaluation.step_entity(step, team=team, workflow=workflow)
    bodies = {}
    for grant_id, condition in conditions.items():
        try:
            est = json.loads(_checked(condition))
        except ConditionInvalid:
            continue
        if not evaluation.reads_unknown(est, unknown):
            bodies[grant_id] = est
    if not bodies:
        return set()
    policy_set = cedarpy.PolicySet.from_json_str(
        json.dumps({"staticPolicies": bodies, "templates": {}, "templateLinks": []})
    )
    entities = [
        {"uid": {"type": "Team", "id": team}, "attrs": {}, "parents": []},
        {"uid": {"type": "Agent", "id": agent}, "attrs": {}, "parents": [{"type": "Team", "id": team}]},
        entity,
    ]
    request = {
        "principal": {"type": "Agent", "id": agent},
        "action": {"type": "Action", "id": "auto_approve"},
        "resource": entity["uid"],
        "context": {"hour": now.hour, "weekday": now.isoweekday(), "steps_in_plan": steps_in_plan},
    }
    (result,) = cedarpy.is_authorized_batch([request], policy_set, entities)
    if result.decision != cedarpy.Decision.Allow:
        return set()
    return set(result.diagnostics.reasons) & set(bodies)
