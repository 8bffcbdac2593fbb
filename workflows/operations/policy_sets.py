"""Versions of a team's Cedar policy set (docs/explanation/policies.md#versions).

An operator of the team proposes a new text; it is checked at once (Cedar
parses and validates it against the published schema, every policy has an
`@id`, the global set only forbids) and stored as the next version, with a
pending `PolicyChange`: the same flow, audit and console page as a loosening
of an action's policy. It takes effect only when a reviewer of that team,
another person than the proposer, authorizes it; the proposal names the
live version it was made against, and one made stale by a later version is
refused, never applied over it. The global set is proposed by an operator
and authorized by a reviewer of the `global` group. A proposed text is
replayed once against the team's last plans, and the replay stored with its
version (`replay`).
"""

from __future__ import annotations

import difflib

from django.db import transaction
from django.db.models import Max
from django.utils import timezone

from workflows import actions, persons, roles, teams
from workflows.audit import journal
from workflows.db import sha256_hex
from workflows.engine import policy as engine_policy
from workflows.engine.transitions import move
from workflows.errors import NotAllowed, NotVisible, WrongState
from workflows.models import ActionPolicy, PolicyChange, PolicySet, PolicySetVersion, Team, Workflow
from workflows.policy import evaluation
from workflows.policy.evaluation import LiveSet
from workflows.policy.text import check
from workflows.reasons import clean_reason
from workflows.states import PolicyChangeStatus

GLOBAL = PolicySet.GLOBAL


def _team(name: str, user) -> Team | None:
    """The team a set belongs to (None for the global set), if `user` sees it."""
    if name == GLOBAL:
        return None
    team = Team.objects.visible_to(user).filter(name=name).first()
    if team is None:
        raise NotVisible(f"No team named {name[:64]!r}.")
    return team


def _member(user, name: str) -> bool:
    """Whether `user` belongs to the set's team (the `global` group for the global set)."""
    if name == GLOBAL:
        return user.is_superuser or roles.has_role(user, roles.GLOBAL)
    team = Team.objects.filter(name=name).first()
    return team is not None and team.pk in teams.team_ids(user)


def live_sets(team: str) -> list[LiveSet]:
    """The live global set and the live set of `team`, those that exist."""
    rows = PolicySetVersion.objects.filter(
        policy_set__name__in=[GLOBAL, team], change__status=PolicyChangeStatus.APPLIED
    ).select_related("policy_set")
    found = [row for row in rows if row.version == row.policy_set.live_version]
    found.sort(key=lambda row: row.policy_set.name != GLOBAL)
    return [LiveSet(row.policy_set.name, row.version, row.text) for row in found]


def show(name: str, *, reader) -> dict:
    """The set's live version and every version proposed, newest first."""
    _team(name, reader)
    policy_set = PolicySet.objects.filter(name=name).first()
    versions = (
        PolicySetVersion.objects.filter(policy_set=policy_set)
        .select_related("policy_set", "proposed_by", "change__decided_by")
        .order_by("-version")
        if policy_set
        else []
    )
    history = list(versions)
    live = next((v for v in history if v.state() == "LIVE"), None)
    return {"name": name, "live": live, "history": history}


def propose(name: str, *, by, text: str, reason: str = "") -> PolicyChange:
    """Check `text` and store it as the next version, pending a reviewer."""
    _team(name, by)
    if not (roles.is_operator(by) and _member(by, name)):
        raise NotAllowed(f"Only an operator of {name} can propose a version of its policy set.")
    policies = check(text, global_set=name == GLOBAL)
    reason = clean_reason(reason, required=False)
    # Before the set's lock: the replay reads up to a thousand plans.
    replayed = replay(name, text)
    with transaction.atomic():
        policy_set, _ = PolicySet.objects.get_or_create(name=name)
        policy_set = PolicySet.objects.select_for_update().get(pk=policy_set.pk)
        number = (policy_set.versions.aggregate(last=Max("version"))["last"] or 0) + 1
        version = PolicySetVersion.objects.create(
            policy_set=policy_set, version=number, text=text, proposed_by=by, replay=replayed
        )
        summary = {"policy_set": name, "version": number, "policies": [p.id for p in policies]}
        change = PolicyChange.objects.create(
            action="",
            changes=summary,
            reason=reason,
            base_version=policy_set.live_version,
            requested_by=by,
            policy_set_version=version,
        )
        journal.append(
            actor=by,
            verb="policy_set.proposed",
            obj_type="policy_change",
            obj_id=change.pk,
            data={**summary, "base_version": policy_set.live_version, "text_sha256": sha256_hex(text)},
        )
    return change


def _check_decider(change: PolicyChange, user) -> str:
    name = change.policy_set_version.policy_set.name
    if not (roles.is_reviewer(user) and _member(user, name)):
        raise NotAllowed(f"Only a reviewer of {name} can decide on a version of its policy set.")
    if persons.same(change.requested_by_id, user):
        raise NotAllowed("A policy set version cannot be decided by the person who proposed it.")
    return name


def _locked(change: PolicyChange) -> PolicyChange:
    change = (
        PolicyChange.objects.select_for_update(of=("self",))
        .select_related("requested_by", "policy_set_version__policy_set")
        .get(pk=change.pk)
    )
    if change.status != PolicyChangeStatus.PENDING:
        raise WrongState(f"The policy change is {change.status}, not awaiting a decision.")
    return change


def authorize(change: PolicyChange, *, by, reason: str = "") -> PolicyChange:
    """Make the proposed version live, if the live version is still the one
    it was proposed against; it is checked again (the schema follows the
    installed actions)."""
    name = _check_decider(change, by)
    reason = clean_reason(reason, required=False)
    with transaction.atomic():
        change = _locked(change)
        version = change.policy_set_version
        policy_set = PolicySet.objects.select_for_update().get(pk=version.policy_set_id)
        if policy_set.live_version != change.base_version:
            raise WrongState(
                f"The policy set of {name} changed since this proposal (version {change.base_version}, now "
                f"{policy_set.live_version}): decline it and propose again."
            )
        check(version.text, global_set=name == GLOBAL)
        policy_set.live_version = version.version
        policy_set.updated_at = timezone.now()
        policy_set.save(update_fields=["live_version", "updated_at"])
        move(
            change,
            PolicyChangeStatus.APPLIED,
            actor=by,
            verb="policy_set.authorized",
            decided_by=by,
            decided_at=timezone.now(),
            decision_reason=reason,
            applied_version=version.version,
            data={
                "policy_set": name,
                "version": version.version,
                "replaces": change.base_version,
                "requested_by": change.requested_by.get_username(),
                "decision_reason": reason,
            },
        )
    return change


def decline(change: PolicyChange, *, by, reason: str) -> PolicyChange:
    name = _check_decider(change, by)
    reason = clean_reason(reason)
    with transaction.atomic():
        change = _locked(change)
        move(
            change,
            PolicyChangeStatus.DECLINED,
            actor=by,
            verb="policy_set.declined",
            decided_by=by,
            decided_at=timezone.now(),
            decision_reason=reason,
            data={
                "policy_set": name,
                "version": change.policy_set_version.version,
                "requested_by": change.requested_by.get_username(),
                "reason": reason,
            },
        )
    return change


def diff(change: PolicyChange) -> list[str]:
    """The proposed text as a unified diff against the version it was
    proposed against (the live one then)."""
    version = change.policy_set_version
    base = (
        PolicySetVersion.objects.filter(policy_set_id=version.policy_set_id, version=change.base_version)
        .values_list("text", flat=True)
        .first()
        or ""
    )
    return list(
        difflib.unified_diff(
            base.splitlines(),
            version.text.splitlines(),
            f"version {change.base_version}" if change.base_version else "no policy set",
            f"version {version.version}",
            lineterm="",
        )
    )


def clock():
    """The time policies see (`context.hour`, `context.weekday`)."""
    return timezone.now()


def evaluate(body: dict, *, agent: str, team: str, workflow: str = "plan"):
    """Each step of `body` decided by the live sets of `team` (and the global
    one), a step whose action's policy asks people for more than one
    approval never `auto`."""
    result = evaluation.evaluate(body, agent=agent, team=team, sets=live_sets(team), now=clock(), workflow=workflow)
    return _held(result, body.get("steps") or [])


def _held(result: evaluation.Evaluation, steps: list[dict], rules: dict | None = None) -> evaluation.Evaluation:
    if not any(s.decision == evaluation.AUTO for s in result.steps):
        return result
    if rules is None:
        rules = engine_policy.policies_for({step["action"] for step in steps})
    return result.held_by_action_policies(steps, rules)


REPLAYED_PLANS = 1_000
SHOWN_DESTRUCTIVE = 10


def replay(name: str, text: str) -> dict:
    """How `text`, as the set `name`, would have decided the team's last
    `REPLAYED_PLANS` plans, each as submitted (its agent, its time): how
    many every step of which it would have approved by policy, and some of
    those (id and name) that hold a destructive or irreversible step.
    Done once per version, when it is proposed (`propose`), and stored on
    it: the pages read it, never replay it again."""
    sets = [s for s in live_sets(name) if s.name == GLOBAL] if name != GLOBAL else []
    sets.append(LiveSet(name, 0, text))
    plans = (
        Workflow.objects.filter(**({} if name == GLOBAL else {"team__name": name}))
        .select_related("submitted_by", "team")
        .order_by("-created_at")[:REPLAYED_PLANS]
    )
    team_sets: dict[str, list[LiveSet]] = {}
    counted, auto, risky, destructive = 0, 0, 0, []
    rules = None
    for plan in plans:
        counted += 1
        if plan.team.name not in team_sets:
            others = [s for s in live_sets(plan.team.name) if s.name != GLOBAL] if name == GLOBAL else []
            team_sets[plan.team.name] = [*sets, *others]
        try:
            result = evaluation.evaluate(
                {"steps": plan.plan},
                agent=plan.submitted_by.get_username(),
                team=plan.team.name,
                sets=team_sets[plan.team.name],
                now=plan.created_at,
                workflow=str(plan.pk),
            )
        except evaluation.PlanTooLarge:
            continue
        if result.auto and rules is None:
            # Read once, for the first plan that needs them: every action's policy.
            rules = {p.action: p for p in ActionPolicy.objects.all()}
        if _held(result, plan.plan, rules or {}).auto:
            auto += 1
            if any(_irreversible(step["action"]) for step in plan.plan):
                risky += 1
                if len(destructive) < SHOWN_DESTRUCTIVE:
                    destructive.append({"id": str(plan.pk), "name": plan.name})
    return {"plans": counted, "auto": auto, "destructive_count": risky, "destructive": destructive}


def would_have(version: PolicySetVersion) -> dict:
    """The version's stored replay; one proposed before replays were stored
    is replayed now, once, and stored."""
    if version.replay is None:
        version.replay = replay(version.policy_set.name, version.text)
        PolicySetVersion.objects.filter(pk=version.pk, replay__isnull=True).update(replay=version.replay)
    return version.replay


def _irreversible(action: str) -> bool:
    found = actions.find(action)
    return found is None or found.destructive or found.irreversible
