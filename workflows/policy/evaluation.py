"""Deciding a plan's steps by the live policy sets (docs/explanation/policies.md#evaluation).

For each step, Cedar answers two requests, `submit` and `auto_approve`,
with the agent as principal and the step as resource. The rules, all
failing closed:

- Submission is allowed unless a `forbid` determines the `submit` answer
  (`forbid`) or a policy errors (`policy_error`): Cedar skips a policy that
  errors, which could drop a forbid, so an error refuses. Cedar's default
  deny (no permit at all) never blocks a submission.
- A step is `auto` only when `auto_approve` is permitted and no policy
  errored; a destructive or irreversible step only when a determining
  permit says `@allow_destructive("true")`; never when a determining
  permit asks humans for something (`@approvals`, `@reviewer_group`).
  Everything else goes to a `human`, with the approvals and reviewer groups
  the determining permits' annotations raise (`Evaluation.asks`), which
  the plan keeps and its approvals answer to. Each decision names its
  `reason` (one of `REASONS`), which the workflow keeps as decided then.
- A run-time reference (`$from`, `$secret`, `$decision`) is the record
  `{"ref": ...}` to Cedar: its value is not known yet. A policy that reads
  the args at or under a reference, or reads a record that holds one, is
  said to touch it (found in the policy's JSON form, below); its answer
  about that step proves nothing, so the step goes to a human, and an error
  it raises there is no `policy_error`. A value Cedar cannot hold (null, a
  fraction, an integer beyond 64 bits) is left out and treated the same way.

Bounds: at most `MAX_STEPS` steps, `MAX_DEPTH` levels of nesting in any
step's args (measured without recursion, before anything else reads them: a
plan built in code may nest deeper than Python recurses) and
`MAX_PLAN_CHARS` characters of JSON; past them, `PlanTooLarge`. With the
bounds of a set (`workflows.policy.text`: at most 1,000 policies), one
evaluation is bounded in time and memory (docs/performance.md#o-policies).
"""

from __future__ import annotations

import json
import re
from dataclasses import dataclass, field
from datetime import datetime
from functools import lru_cache

import cedarpy

from workflows import actions
from workflows.errors import DomainError
from workflows.policy import schema
from workflows.policy.text import Policy, PolicyTextInvalid, check

MAX_PLAN_CHARS = 512_000
MAX_DEPTH = 16
# As many steps as a plan may have (workflows.operations.plans.MAX_STEPS).
MAX_STEPS = 50
I64 = 2**63
FORBID, HUMAN, AUTO = "forbid", "human", "auto"
POLICY_ERROR = "policy_error"
# Why a step got its decision.
PERMITTED, NO_POLICY_SET, NO_PERMIT, FORBIDDEN_AUTO = "permitted", "no_policy_set", "no_permit", "auto_forbidden"
REFERENCE, DESTRUCTIVE, ANNOTATION, FORBIDDEN = "reference", "destructive", "annotation", "forbidden"
ACTION_POLICY = "action_policy"
REASONS = {
    PERMITTED: "permitted auto_approve by {policies}",
    NO_POLICY_SET: "the team has no live policy set",
    NO_PERMIT: "no policy permits auto_approve for it",
    FORBIDDEN_AUTO: "auto_approve is forbidden by {policies}",
    REFERENCE: "{policies} read a run-time value ($from, $secret or $decision) of it, not known at submission",
    DESTRUCTIVE: 'it is destructive or irreversible and no permit of it says @allow_destructive("true")',
    ANNOTATION: "{policies} ask people for it (@approvals or @reviewer_group)",
    FORBIDDEN: "submission is forbidden by {policies}",
    ACTION_POLICY: "permitted auto_approve by {policies}, but its action's policy asks people for it "
    "(more than one approval, or a reviewer group)",
    POLICY_ERROR: "a policy could not be evaluated on it",
}


def why(reason: str | None, policies: list[str]) -> str:
    """A decision's reason in words, naming the policies that decided."""
    named = ", ".join(policies) if policies else "a policy"
    return REASONS.get(reason or "", "not recorded").format(policies=named)


def basis(team: str, version: int, policies) -> str:
    """An approval's basis by the team's set: `policy:<team>:<@id,...>@<version>`,
    the @ids sorted and each once (an @id holds neither `,` nor `@`; a team
    name no `:`), so the same decision always names the same basis."""
    return f"policy:{team}:{','.join(sorted(set(policies)))}@{version}"


_ERRORING = re.compile(r"policy `([^`]*)`")


class PlanTooLarge(DomainError):
    code = "invalid"


class PolicyForbidden(DomainError):
    code = "policy_forbidden"
    status = 403


class PolicyErrored(DomainError):
    code = "policy_error"
    status = 403


@dataclass(frozen=True)
class LiveSet:
    """One live policy set: the global one or the team's."""

    name: str
    version: int
    text: str


@dataclass
class StepDecision:
    key: str
    decision: str
    approvals: int | None = None
    group: str | None = None
    policies: list[str] = field(default_factory=list)
    error: str | None = None
    basis: str | None = None
    reason: str | None = None
    # The policies the reason is about (`policies`: all that decided).
    named: list[str] | None = None
    # Every reviewer group the determining permits name (`group`: the
    # first), and the permits that ask people for something.
    groups: list[str] = field(default_factory=list)
    asking: list[str] = field(default_factory=list)

    @property
    def why(self) -> str:
        return why(self.reason, self.policies if self.named is None else self.named)


@dataclass
class Evaluation:
    version: int | None
    steps: list[StepDecision]

    @property
    def forbidding(self) -> list[str]:
        return _unique(p for s in self.steps if s.decision == FORBID and s.error is None for p in s.policies)

    @property
    def erroring(self) -> list[str]:
        return _unique(p for s in self.steps if s.error == POLICY_ERROR for p in s.policies)

    team: str | None = None

    @property
    def auto(self) -> bool:
        return bool(self.steps) and all(s.decision == AUTO for s in self.steps)

    @property
    def basis(self) -> str | None:
        """The basis of the plan's approval by policy (`basis`): the team's
        set version and every @id that permitted one of its steps; None
        unless every step is `auto`."""
        if not self.auto or self.team is None or self.version is None:
            return None
        return basis(self.team, self.version, [p for s in self.steps for p in s.policies])

    @property
    def asks(self) -> dict | None:
        """What the determining permits' annotations ask of the people who
        approve the plan (`Workflow.policy_asks`): the most approvals any
        asks for, every group any names, which permits asked, for which
        steps; None when none asks anything."""
        asking = [s for s in self.steps if s.decision == HUMAN and (s.approvals or s.groups)]
        if not asking:
            return None
        approvals = max((s.approvals for s in asking if s.approvals), default=None)
        return {
            "approvals": approvals,
            "groups": sorted({g for s in asking for g in s.groups}),
            "policies": sorted({p for s in asking for p in s.asking}),
            "steps": [s.key for s in asking],
        }

    def held_by_action_policies(self, steps: list[dict], rules: dict) -> Evaluation:
        """Send to people each `auto` step whose action's policy (`rules`, by
        action) asks more of them than one approval of any reviewer: an
        approval no person made stands for one such approval only
        (docs/explanation/policies.md#approval-by-policy)."""
        actions_of = {step["key"]: step["action"] for step in steps}
        for s in self.steps:
            rule = rules.get(actions_of.get(s.key))
            if s.decision == AUTO and rule is not None and (rule.approvals_required > 1 or rule.reviewer_group):
                s.decision, s.basis, s.reason = HUMAN, None, ACTION_POLICY
        return self

    def enforce(self) -> None:
        """Refuse a submission a forbid determines, or one a policy errored on."""
        if forbidding := self.forbidding:
            raise PolicyForbidden(f"Forbidden by policy: {', '.join(forbidding)}.", details={"policies": forbidding})
        if any(s.error == POLICY_ERROR for s in self.steps):
            erroring = self.erroring
            named = f": {', '.join(erroring)}" if erroring else ""
            raise PolicyErrored(
                f"A policy could not be evaluated on this plan{named}; it is refused rather than judged "
                "without that policy.",
                details={"policies": erroring},
            )


def _unique(items) -> list[str]:
    return list(dict.fromkeys(items))


@dataclass
class _Compiled:
    policy_set: cedarpy.PolicySet
    by_key: dict[str, tuple[str, Policy]]  # Cedar's key → (set name, policy)
    touches: dict[str, list[tuple[str, ...]]]
    auto_scope: set[str]


def _applies_to(scope: dict, action: str) -> bool:
    """Whether a policy's action scope can match `action` (unknown forms: yes)."""
    op = scope.get("op")
    if op == "All":
        return True
    if op == "==" or (op == "in" and "entity" in scope):
        return scope["entity"].get("id") == action if scope["entity"].get("type") == "Action" else True
    if op == "in" and "entities" in scope:
        return any(e.get("id") == action for e in scope["entities"])
    return True


def _args_paths(node, found: list[tuple[str, ...]], continued: bool = False) -> tuple[str, ...] | None:
    """Collect in `found` every path read under some `.args`: the longest
    chain of attribute reads (`.` or `has`) after it. Returns the chain of
    `node` itself, for its parent to extend."""
    if isinstance(node, list):
        for item in node:
            _args_paths(item, found)
        return None
    if not isinstance(node, dict):
        return None
    for op in (".", "has"):
        if op in node and isinstance(node[op], dict) and "attr" in node[op]:
            inner = _args_paths(node[op]["left"], found, continued=True)
            attr = node[op]["attr"]
            chain = inner + (attr,) if inner is not None else (() if attr == "args" else None)
            if chain is not None and not continued:
                found.append(chain)
            return chain
    for value in node.values():
        _args_paths(value, found)
    return None


@lru_cache(maxsize=32)
def _compile(sets: tuple[LiveSet, ...]) -> _Compiled:
    by_key, est = {}, {}
    for live in sets:
        for policy in check(live.text, global_set=live.name == "global"):
            key = f"{live.name}/{policy.id}"
            by_key[key] = (live.name, policy)
            est[key] = policy.est
    touches = {}
    for key, body in est.items():
        found: list[tuple[str, ...]] = []
        _args_paths(body.get("conditions", []), found)
        touches[key] = found
    auto_scope = {key for key, body in est.items() if _applies_to(body.get("action", {}), "auto_approve")}
    handle = cedarpy.PolicySet.from_json_str(json.dumps({"staticPolicies": est, "templates": {}, "templateLinks": []}))
    return _Compiled(handle, by_key, touches, auto_scope)


def _value(value, path: tuple[str, ...], unknown: list[tuple[str, ...]]):
    """A plan value as Cedar JSON; a reference as `{"ref": kind}` and its
    path in `unknown`; a value Cedar cannot hold is left out (None) with its
    path in `unknown`. Recursive: `_check_bounds` has bounded the depth."""
    if isinstance(value, dict):
        if len(value) == 1 and next(iter(value)) in schema.REFERENCE_KEYS:
            unknown.append(path)
            return {"ref": next(iter(value))[1:]}
        if any(key.startswith("__") for key in value):
            # Cedar's JSON reads `__entity` and `__extn` as escapes: never let
            # a plan name an entity; hold the record as unknown instead.
            unknown.append(path)
            return None
        record = {}
        for key, item in value.items():
            converted = _value(item, (*path, key), unknown)
            if converted is not None:
                record[key] = converted
        return record
    if isinstance(value, list):
        items = [_value(item, path, unknown) for item in value]
        return [item for item in items if item is not None]
    if isinstance(value, bool | str):
        return value
    if isinstance(value, float) and value.is_integer():
        value = int(value)
    if isinstance(value, int) and -I64 <= value < I64:
        return value
    unknown.append(path)
    return None


def _check_bounds(steps: list) -> None:
    """PlanTooLarge for too many steps or args nested too deep, walking the
    args with a stack of its own, stopping at the first value too deep."""
    if len(steps) > MAX_STEPS:
        raise PlanTooLarge(f"A plan evaluated by policy may have at most {MAX_STEPS} steps; this one has {len(steps)}.")
    for step in steps:
        stack = [(step.get("args") or {}, 1)]
        while stack:
            value, depth = stack.pop()
            if depth > MAX_DEPTH:
                raise PlanTooLarge(f"A step's args may nest at most {MAX_DEPTH} levels deep.")
            if isinstance(value, dict) and not (len(value) == 1 and next(iter(value)) in schema.REFERENCE_KEYS):
                stack.extend((item, depth + 1) for item in value.values())
            elif isinstance(value, list):
                stack.extend((item, depth + 1) for item in value)


def step_entity(step: dict, *, team: str, workflow: str = "plan") -> tuple[dict, list[tuple[str, ...]]]:
    """A plan's step as the Cedar `Step` entity, and the paths of its args
    whose value is not known before it runs (`_value`)."""
    _check_bounds([step])
    unknown: list[tuple[str, ...]] = []
    args = _value(step.get("args") or {}, (), unknown)
    action = actions.find(step["action"])
    entity = {
        "uid": {"type": "Step", "id": f"{workflow}/{step['key']}"},
        "attrs": {
            "action": step["action"],
            "args": args or {},
            "destructive": bool(action and action.destructive),
            "irreversible": bool(action is None or action.irreversible),
            "team": team,
        },
        "parents": [],
    }
    return entity, unknown


def reads_unknown(est: dict, unknown: list[tuple[str, ...]]) -> bool:
    """Whether a policy (Cedar's JSON form) reads the args at, under or
    above a path whose value is not known yet."""
    if not unknown:
        return False
    found: list[tuple[str, ...]] = []
    _args_paths(est.get("conditions", []), found)
    return _touched(found, unknown)


def _touched(paths: list[tuple[str, ...]], unknown: list[tuple[str, ...]]) -> bool:
    return any(p[: len(u)] == u or u[: len(p)] == p for p in paths for u in unknown)


def evaluate(
    body: dict, *, agent: str, team: str, sets: list[LiveSet], now: datetime, workflow: str = "plan"
) -> Evaluation:
    """Each step's decision under `sets` (the live global and team sets)."""
    team_set = next((s for s in sets if s.name != "global"), None)
    version = team_set.version if team_set else None
    steps = body.get("steps") or []
    if not sets:
        return Evaluation(version, [StepDecision(step["key"], HUMAN, reason=NO_POLICY_SET) for step in steps])
    _check_bounds(steps)
    if len(json.dumps(body, default=str)) > MAX_PLAN_CHARS:
        raise PlanTooLarge(f"A plan evaluated by policy may have at most {MAX_PLAN_CHARS} characters of JSON.")
    try:
        compiled = _compile(tuple(sets))
    except PolicyTextInvalid:
        # A live set the schema no longer accepts (an action's arguments
        # changed since): judged by no policy at all, every step is refused.
        return Evaluation(
            version, [StepDecision(step["key"], FORBID, error=POLICY_ERROR, reason=POLICY_ERROR) for step in steps]
        )
    entities = [
        {"uid": {"type": "Team", "id": team}, "attrs": {}, "parents": []},
        {"uid": {"type": "Agent", "id": agent}, "attrs": {}, "parents": [{"type": "Team", "id": team}]},
    ]
    context = {"hour": now.hour, "weekday": now.isoweekday(), "steps_in_plan": len(steps)}
    requests, unknowns, flags = [], [], []
    for step in steps:
        entity, unknown = step_entity(step, team=team, workflow=workflow)
        uid = entity["uid"]
        entities.append(entity)
        unknowns.append(unknown)
        flags.append(entity["attrs"]["destructive"] or entity["attrs"]["irreversible"])
        for name in schema.ACTIONS:
            principal = {"type": "Agent", "id": agent}
            requests.append(
                {"principal": principal, "action": {"type": "Action", "id": name}, "resource": uid, "context": context}
            )
    results = cedarpy.is_authorized_batch(requests, compiled.policy_set, entities)
    decided = [
        _decide(step["key"], results[2 * i], results[2 * i + 1], unknowns[i], flags[i], compiled, team_set)
        for i, step in enumerate(steps)
    ]
    return Evaluation(version, decided, team=team_set.name if team_set else None)


def _erroring(result, compiled: _Compiled) -> set[str] | None:
    """The keys of the policies that errored; None when Cedar could not
    answer at all (then every policy is as good as erroring)."""
    keys = set()
    for message in result.diagnostics.errors:
        match = _ERRORING.search(message)
        if match is None or match.group(1) not in compiled.by_key:
            return None
        keys.add(match.group(1))
    return keys


def _decide(key, submit, auto, unknown, destructive, compiled: _Compiled, team_set) -> StepDecision:
    def name(cedar_key: str) -> str:
        return compiled.by_key[cedar_key][1].id

    touched = {k for k, paths in compiled.touches.items() if unknown and _touched(paths, unknown)}
    submit_errors, auto_errors = _erroring(submit, compiled), _erroring(auto, compiled)
    if submit_errors is None or auto_errors is None:
        return StepDecision(key, FORBID, error=POLICY_ERROR, reason=POLICY_ERROR)
    if submit.decision == cedarpy.Decision.Deny and submit.diagnostics.reasons:
        forbidding = _unique(name(k) for k in submit.diagnostics.reasons)
        return StepDecision(key, FORBID, policies=forbidding, reason=FORBIDDEN)
    hard = (submit_errors | auto_errors) - touched
    if hard or submit.decision == cedarpy.Decision.NoDecision:
        erroring = _unique(name(k) for k in sorted(hard))
        return StepDecision(key, FORBID, policies=erroring, error=POLICY_ERROR, reason=POLICY_ERROR)
    permits = [k for r in (submit, auto) if r.decision == cedarpy.Decision.Allow for k in r.diagnostics.reasons]
    permitted = list(auto.diagnostics.reasons) if auto.decision == cedarpy.Decision.Allow else []
    auto_permits = [k for k in permitted if compiled.by_key[k][1].allows_destructive] if destructive else permitted
    blocking = (touched & compiled.auto_scope) | submit_errors | auto_errors
    asking = [k for k in permits if compiled.by_key[k][1].asks_people]
    if auto_permits and not blocking and not asking:
        ids = _unique(name(k) for k in auto_permits)
        found = basis(team_set.name, team_set.version, ids) if team_set else None
        return StepDecision(key, AUTO, policies=ids, basis=found, reason=PERMITTED)
    forbidding = auto.diagnostics.reasons if auto.decision == cedarpy.Decision.Deny else []
    deciding = [*permits, *forbidding, *sorted(blocking)]
    if blocking:
        reason, named = REFERENCE, sorted(blocking)
    elif not permitted:
        reason, named = (FORBIDDEN_AUTO, list(forbidding)) if forbidding else (NO_PERMIT, [])
    elif not auto_permits:
        reason, named = DESTRUCTIVE, permitted
    else:
        reason, named = ANNOTATION, asking
    annotated = [compiled.by_key[k][1] for k in permits]
    approvals = max((p.approvals for p in annotated if p.approvals is not None), default=None)
    groups = _unique(p.reviewer_group for p in annotated if p.reviewer_group)
    return StepDecision(
        key,
        HUMAN,
        approvals=approvals,
        group=groups[0] if groups else None,
        groups=groups,
        asking=_unique(name(k) for k in asking),
        policies=_unique(name(k) for k in deciding),
        reason=reason,
        named=_unique(name(k) for k in named),
    )
