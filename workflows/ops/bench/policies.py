"""(o) Policies: what a team's Cedar policy set costs a plan
(docs/explanation/policies.md#evaluation), with `--policy-sizes` (default
10, 100 and 1,000) policies in the team's live set.

A fresh team per run, so that its first figures are those of a team with no
policy set at all: the baseline. Then, for each size, a version of that many
policies (a mix of what teams write: auto-approve permits for an action,
approvals raised above an amount, forbids at some hours, permits for other
teams, none of which approves the bench's `noop` plans by itself) is
proposed by an operator of the team and authorized by a reviewer, as people
do, and measured three ways:

- in process, the first evaluation after the version went live (Cedar
  parses the set then; later plans reuse it), and the cost per step of
  evaluating a plan of `STEPS` steps, `--policy-samples` times: µs per step,
  p50 and p99;
- through the JSON API, `--policy-path-samples` plans each submitted by the
  team's agent and approved by a reviewer, one after another: the whole
  submit → APPROVED path in ms, and inside it the time spent in the team's
  policies (`operations.policy_sets.evaluate`: reading the live sets and
  evaluating the plan), as its share of the path; and the path's p50 as a
  ratio to the baseline's, measured the same way in the same run before any
  set was live.

The plans submitted are cancelled at the end: no step of theirs is left due.
"""

from __future__ import annotations

import math
import statistics
import time
from contextlib import contextmanager

from django.contrib.auth import get_user_model
from django.contrib.auth.models import Group
from django.test import Client
from django.test.utils import override_settings

from workflows import roles
from workflows.models import Team, Workflow
from workflows.operations import cancellation, policy_sets, tokens
from workflows.ops.bench.common import BenchError
from workflows.ops.bench.fleet import spread
from workflows.policy import evaluation
from workflows.states import WorkflowStatus

STEPS = 5


def percentiles(values: list[float], digits: int = 1) -> dict:
    """n, p50, p99 (nearest rank) and max."""
    ordered = sorted(values)

    def rank(p):
        return round(ordered[max(0, math.ceil(p / 100 * len(ordered)) - 1)], digits)

    return {"n": len(ordered), "p50": rank(50), "p99": rank(99), "max": round(ordered[-1], digits)}


def policy_text(count: int, team: str) -> str:
    """`count` policies, each with its own `@id`, cycling through four kinds."""
    kinds = (
        '@id("auto-read-{i}")\npermit(principal, action == Action::"auto_approve", resource)\n'
        'when {{ resource.action == "bench.read-{i}" }};\n',
        '@id("two-for-prod-{i}")\n@approvals("2")\npermit(principal, action == Action::"submit", resource)\n'
        'when {{ resource.args has title && resource.args.title like "*prod-{i}*" }};\n',
        '@id("no-friday-deploy-{i}")\nforbid(principal, action == Action::"submit", resource)\n'
        'when {{ resource.action == "bench.deploy-{i}" && context.weekday == 5 && context.hour >= 14 }};\n',
        '@id("other-team-{i}")\npermit(principal in Team::"{team}", action == Action::"auto_approve", resource)\n'
        'when {{ resource.team == "bench-other-{i}" && !resource.destructive }};\n',
    )
    return "".join(kinds[i % len(kinds)].format(i=i, team=team) for i in range(count))


def plan(steps: int, label: str) -> dict:
    return {
        "name": f"bench policies {label}",
        "submission_key": f"bench-policies-{label}",
        "steps": [{"key": f"s{k}", "action": "noop", "args": {"n": k}} for k in range(steps)],
    }


@contextmanager
def timing_policies(spent: list[float]):
    """Each call of the team's policy evaluation made meanwhile adds its ms
    to `spent` (the submission calls it through the module's attribute)."""
    real = policy_sets.evaluate

    def timed(*args, **kwargs):
        began = time.perf_counter()
        try:
            return real(*args, **kwargs)
        finally:
            spent.append((time.perf_counter() - began) * 1000)

    policy_sets.evaluate = timed
    try:
        yield
    finally:
        policy_sets.evaluate = real


class PoliciesPart:
    """Part (o), run by the Bench with its personas and options."""

    def __init__(self, bench):
        self.bench, self.o = bench, bench.o
        self.submitted: list = []

    def _people(self):
        users = get_user_model()
        team = Team.objects.create(name=f"bench-policies-{self.bench.tag}")
        operator, _ = users.objects.get_or_create(username="bench-policy-operator")
        operator.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
        agent, reviewer = self.bench.agent, self.bench.reviewer
        team.members.add(operator, reviewer, agent)
        return team, operator, agent, reviewer

    def run(self) -> dict:
        team, operator, agent, reviewer = self._people()
        agent_client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(agent, name='bench policies', team=team)}")
        reviewer_client = Client(
            HTTP_AUTHORIZATION=f"Bearer {tokens.issue(reviewer, name='bench policies', team=team)}"
        )
        result: dict = {"team": team.name, "steps_per_plan": STEPS, "sizes": []}
        try:
            # As served in production: DEBUG off (no query log).
            with override_settings(DEBUG=False, ALLOWED_HOSTS=["testserver"], SECURE_SSL_REDIRECT=False):
                self._path(agent_client, reviewer_client, "warm", 3)
                result["baseline"] = self._path(agent_client, reviewer_client, "none", self.o.policy_path_samples)
                for size in self.o.policy_sizes:
                    result["sizes"].append(
                        self._size(size, team, operator, agent, reviewer, agent_client, reviewer_client)
                    )
                    self.bench.log(self._line(result["sizes"][-1], result["baseline"]["path_ms"]))
        finally:
            self._cancel(operator)
        base = result["baseline"]["path_ms"]["p50"]
        for size in result["sizes"]:
            size["path_ratio_p50_to_baseline"] = round(size["path_ms"]["p50"] / base, 2) if base else None
        return result

    def _size(self, size, team, operator, agent, reviewer, agent_client, reviewer_client) -> dict:
        change = policy_sets.propose(team.name, by=operator, text=policy_text(size, team.name))
        policy_sets.authorize(change, by=reviewer)
        body = plan(STEPS, "in-process")
        began = time.perf_counter()
        decided = policy_sets.evaluate(body, agent=agent.get_username(), team=team.name)
        first_ms = (time.perf_counter() - began) * 1000
        if decided.version is None or any(step.decision != evaluation.HUMAN for step in decided.steps):
            raise BenchError(f"the {size}-policy set did not send the bench plan to a human: {decided.steps}")
        sets = policy_sets.live_sets(team.name)
        per_step = []
        for _ in range(self.o.policy_samples):
            began = time.perf_counter()
            evaluation.evaluate(body, agent=agent.get_username(), team=team.name, sets=sets, now=policy_sets.clock())
            per_step.append((time.perf_counter() - began) * 1_000_000 / STEPS)
        path = self._path(agent_client, reviewer_client, f"p{size}", self.o.policy_path_samples)
        return {
            "policies": size,
            "version": decided.version,
            "first_evaluation_ms": round(first_ms, 1),
            "per_step_us": percentiles(per_step),
            **path,
        }

    def _path(self, agent_client: Client, reviewer_client: Client, label: str, count: int) -> dict:
        """`count` plans submitted and approved through the API, one after another."""
        whole, inside = [], []
        for n in range(count):
            spent: list[float] = []
            with timing_policies(spent):
                began = time.perf_counter()
                answer = agent_client.post(
                    "/api/v1/workflows", plan(STEPS, f"{self.bench.tag}-{label}-{n}"), content_type="application/json"
                )
                if answer.status_code != 201:
                    raise BenchError(f"submission answered {answer.status_code}: {answer.content[:200]!r}")
                shown = answer.json()
                self.submitted.append(shown["id"])
                approved = reviewer_client.post(
                    f"/api/v1/workflows/{shown['id']}/approve",
                    {"revision": shown["revision"], "plan_hash": shown["plan_hash"]},
                    content_type="application/json",
                )
                elapsed = (time.perf_counter() - began) * 1000
            if approved.status_code != 200 or approved.json()["status"] != WorkflowStatus.APPROVED:
                raise BenchError(f"approval answered {approved.status_code}: {approved.content[:200]!r}")
            whole.append(elapsed)
            inside.append(sum(spent))
        return {
            "path_ms": spread(whole, 2),
            "policy_ms": spread(inside, 3),
            "policy_share_of_path": round(sum(inside) / sum(whole), 4),
            "policy_share_p50": round(statistics.median(inside) / statistics.median(whole), 4),
        }

    def _line(self, size: dict, base: dict) -> str:
        step, path = size["per_step_us"], size["path_ms"]
        return (
            f"    {size['policies']:,} policies: {step['p50']} µs per step p50, {step['p99']} p99; "
            f"submit -> APPROVED p50 {path['p50']} ms ({round(path['p50'] / base['p50'], 2)} x no policy set's "
            f"{base['p50']} ms), {100 * size['policy_share_of_path']:.1f}% of it in the policies"
        )

    def _cancel(self, operator) -> None:
        for workflow in Workflow.objects.filter(pk__in=self.submitted, status=WorkflowStatus.APPROVED):
            cancellation.cancel(workflow, by=operator, reason="bench policies: measured, not run")
