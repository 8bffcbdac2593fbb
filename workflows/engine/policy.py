"""Resume with current policy: an old checkpoint is not a permanent grant.

`evaluate` runs before every attempt (first, retry, recovery, replay) and for
replay previews. Any failed check blocks the step with POLICY_FAILED; only a
fresh approval lets it go on. Plan binding is one of the checks: the plan's
hash is recomputed from its stored steps, and only approvals sealed for that
hash count (`workflows.engine.binding`).
"""

import uuid
from dataclasses import dataclass, field
from datetime import UTC, timedelta

from django.contrib.auth import get_user_model
from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows import actions, persons, roles
from workflows.engine import bases, binding, gates
from workflows.models import ActionPolicy, Approval, StandingGrant, Step, Workflow
from workflows.states import WorkflowStatus

NOT_CANCELLED = "workflow not cancelled"
CANCELLED = "the workflow was cancelled: none of its steps starts any more"


@dataclass(frozen=True)
class Check:
    name: str
    ok: bool
    detail: str


def policies_for(names) -> dict[str, ActionPolicy]:
    """Current policies of several actions in one query (created if missing)."""
    names = set(names)
    found = {p.action: p for p in ActionPolicy.objects.filter(action__in=names)}
    for name in names - set(found):
        found[name] = policy_for(name)
    return found


def policy_for(action: str) -> ActionPolicy:
    """The action's policy row, created with safe defaults on first use."""
    policy = ActionPolicy.objects.filter(action=action).first()
    if policy is None:
        try:
            with transaction.atomic():
                policy = ActionPolicy.objects.create(action=action)
        except IntegrityError:
            policy = ActionPolicy.objects.get(action=action)
    return policy


@dataclass(frozen=True)
class Asked:
    """What a team's Cedar policies asked of the people who approve a plan
    (`Workflow.policy_asks`, docs/explanation/policies.md#annotations),
    standing with its actions' policies wherever approvals are counted and
    approvers' groups checked: the approvals needed are the larger, and an
    approver must be in every group either names. `action` names it in a
    refusal."""

    action: str
    approvals_required: int = 1
    reviewer_group: str = ""
    risk: str = ActionPolicy.Risk.LOW
    approval_ttl_seconds: int = 0
    chat_decisions: bool = True
    enabled: bool = True


def asked(workflow: Workflow) -> list[Asked]:
    """The plan's `policy_asks` as rules: one asking for its approvals and
    first group, one more for each other group; none when nothing was asked."""
    asks = workflow.policy_asks
    if not asks:
        return []
    name = "policy " + ", ".join(asks.get("policies") or ["(unnamed)"])
    groups = asks.get("groups") or [""]
    return [
        Asked(name, approvals_required=(asks.get("approvals") or 1) if i == 0 else 1, reviewer_group=group)
        for i, group in enumerate(groups)
    ]


def plan_rules(workflow: Workflow, current: dict | None = None) -> list:
    """What a plan's approvals answer to: its actions' current policies
    (`current`: already read, by action) and what its team's Cedar policies
    asked of people (`asked`)."""
    names = {step["action"] for step in workflow.plan}
    current = policies_for(names) if current is None else current
    return [current[name] for name in sorted(names)] + asked(workflow)


def valid_approvals(workflow: Workflow, policies: list[ActionPolicy], now=None) -> list[Approval]:
    """Approvals that still count: sealed by the audit key, for this exact
    plan as its steps are stored now, by a reviewer who is still active and
    still a reviewer, not the submitter, within the TTL of the strictest
    high-risk action. One per reviewer."""
    return valid_approvals_many([workflow], {workflow.pk: policies}, now)[workflow.pk]


def valid_approvals_many(workflows: list[Workflow], policies: dict, now=None) -> dict:
    """`valid_approvals` of several workflows (`policies`: each workflow's
    plan policies) in three queries, whatever their number."""
    return {pk: tally.valid for pk, tally in _tally_approvals(workflows, policies, now).items()}


@dataclass
class Tally:
    valid: list[Approval]
    # Set aside by plan binding: approvals of a plan other than the stored
    # steps, and approvals whose seal does not verify.
    other_plan: int = 0
    unsealed: int = 0
    # The approvals no person made (docs/explanation/policies.md#approval-by-policy),
    # sealed for this plan, within the lifetime: one per basis (the team's
    # policies, each standing grant), they stand together for every
    # approval the plan needs, while every one's basis is live. `dead`: why
    # such approvals no longer count (a basis that is no longer live).
    by_bases: list[Approval] = field(default_factory=list)
    dead: list[str] | None = None


def _tally_approvals(workflows: list[Workflow], policies: dict, now=None, hashes: dict | None = None) -> dict:
    """Each workflow's approvals that count, and how many binding set aside.
    `hashes`: each workflow's plan hash recomputed from its stored steps, as
    `binding.stored_hashes` gives it (read here when not given)."""
    now = now or timezone.now()
    approvals = list(
        Approval.objects.filter(workflow__in=[w.pk for w in workflows], decision=Approval.Decision.APPROVE)
        .select_related("reviewer")
        .order_by("-created_at")
    )
    if not approvals:
        return {workflow.pk: Tally([]) for workflow in workflows}
    if hashes is None:
        hashes = binding.stored_hashes((workflow.pk, 0) for workflow in workflows)
    oldest = {}
    for workflow in workflows:
        ttls = [
            p.approval_ttl_seconds
            for p in policies[workflow.pk]
            if p.risk == ActionPolicy.Risk.HIGH and p.approval_ttl_seconds
        ]
        oldest[workflow.pk] = now - timedelta(seconds=min(ttls)) if ttls else None
    # The approvers' current accounts and roles, so that a deactivated
    # approver or one removed from the reviewers no longer counts. Asked
    # apart: joined into the query above, the planner may walk a busy
    # reviewer's every approval instead of these workflows' few.
    people_ids = {approval.reviewer_id for approval in approvals if approval.reviewer_id is not None}
    reviewers = set(
        get_user_model()
        .objects.filter(
            pk__in=people_ids,
            is_active=True,
            groups__name=roles.REVIEWERS,
        )
        .values_list("pk", flat=True)
    )
    # A policy's reviewer group: only approvals of reviewers still in it
    # count, as if the others had been deactivated.
    groups = {workflow.pk: reviewer_groups(policies[workflow.pk]) for workflow in workflows}
    in_groups = {frozenset(needed): roles.in_all_groups(reviewers, needed) for needed in groups.values()}
    by_pk = {workflow.pk: workflow for workflow in workflows}
    authors = persons.plan_authors(by_pk.values())
    people = persons.keys_of(people_ids | {i for ids in authors.values() for i in ids})
    dead = bases.not_live({approval.basis for approval in approvals if approval.basis})
    tallies = {pk: Tally([]) for pk in by_pk}
    counted = {pk: {} for pk in by_pk}
    for approval in approvals:
        workflow = by_pk[approval.workflow_id]
        tally = tallies[workflow.pk]
        if (
            not approval.plan_hash == workflow.plan_hash == hashes[workflow.pk, 0]
            or approval.revision != workflow.revision
        ):
            tally.other_plan += 1
        elif not binding.verifies(approval):
            tally.unsealed += 1
        elif approval.basis or approval.reviewer_id is None:
            # No person: it counts by its basis alone, while that is live.
            if oldest[workflow.pk] and approval.created_at < oldest[workflow.pk]:
                continue
            if approval.basis in dead or not approval.basis:
                tally.dead = [*(tally.dead or []), dead.get(approval.basis, "an approval with no person and no basis")]
            elif approval.basis not in {a.basis for a in tally.by_bases}:
                tally.by_bases.append(approval)
        elif (
            approval.reviewer_id in in_groups[frozenset(groups[workflow.pk])]
            and people[approval.reviewer_id] not in {people[i] for i in authors[workflow.pk]}
            and not (oldest[workflow.pk] and approval.created_at < oldest[workflow.pk])
        ):
            # One per person: accounts of one person count once.
            approval.person = people[approval.reviewer_id]
            counted[workflow.pk].setdefault(approval.person, approval)
    for pk, by_reviewer in counted.items():
        tallies[pk].valid = list(by_reviewer.values())
        if tallies[pk].dead:
            # They stand together: one basis no longer live, a person approves again.
            tallies[pk].by_bases = []
    _name_grantors([a for tally in tallies.values() for a in tally.by_bases])
    return tallies


def _name_grantors(approvals: list[Approval]) -> None:
    """Leave on each approval by a standing grant its grantor's account id
    (`grantor`), which its proof names with it: one query, none without one.
    (Only live bases reach here: each parses.)"""
    by_grant = {uuid.UUID(a.basis.removeprefix("grant:")): a for a in approvals if a.basis.startswith("grant:")}
    if not by_grant:
        return
    for pk, grantor in StandingGrant.objects.filter(pk__in=list(by_grant)).values_list("pk", "granted_by_id"):
        by_grant[pk].grantor = grantor


def approvals_required(plan_policies) -> int:
    """The approvals a plan needs: its strictest action's, at least one."""
    return max([p.approvals_required for p in plan_policies] + [1])


def chat_decisions(plan_policies) -> bool:
    """Whether a plan under these policies may be decided from a chat
    message: not when any of its actions keeps its decisions in the console
    (docs/guides/slack-reviewers.md#only-open)."""
    return all(p.chat_decisions for p in plan_policies)


def reviewer_groups(plan_policies) -> set[str]:
    """The groups whose members alone may approve a plan with these policies."""
    return {p.reviewer_group for p in plan_policies if p.reviewer_group}


def outside_reviewer_groups(workflow: Workflow, user, plan_policies=None) -> list[tuple[str, str]]:
    """(action, group) for each of the plan's actions whose policy names a
    reviewer group `user` is not (or no longer) a member of, and for each
    group its team's policies asked for (`asked`). `plan_policies`: the
    plan's `plan_rules`, when already read."""
    rules = plan_rules(workflow) if plan_policies is None else plan_policies
    needed = reviewer_groups(rules)
    if not needed:
        return []
    held = set(user.groups.filter(name__in=needed).values_list("name", flat=True))
    return sorted({(r.action, r.reviewer_group) for r in rules if r.reviewer_group and r.reviewer_group not in held})


def evaluate(step: Step) -> list[Check]:
    return evaluate_many([step])[step.pk]


def evaluate_many(steps: list[Step]) -> dict[int, list[Check]]:
    """The checks of several steps, with a fixed number of queries (one reads
    the stored steps of every plan involved, to recompute its hash). Each
    step comes back with `bound_plan_hash`: the hash of its lane's stored
    steps, which its attempt records as the plan it ran under, and (a plan's
    own step) `bound_preview_digest`: the preview of it the latest approval
    that counts was shown, or None; and `approvers`: who approved what it
    runs under, as its approval proof names them (`approvers_out`): the
    approvals that count (and its gate's), or a compensation's requester
    and authorizer."""
    now = timezone.now()
    # Each plan's `review` (set at submission, never changed) from the row read with its step.
    reviews = {step.workflow_id: step.workflow.review for step in steps if not step.lane}
    hashes = binding.stored_hashes(((step.workflow_id, step.lane) for step in steps), reviews=reviews)
    plan_actions = {step.pk: {s["action"] for s in step.workflow.plan} if not step.lane else set() for step in steps}
    current = policies_for(set().union({step.action for step in steps}, *plan_actions.values()))
    forward = {step.workflow_id: step.workflow for step in steps if not step.lane}
    plan_policies = {step.workflow_id: plan_rules(step.workflow, current) for step in steps if not step.lane}
    tallies = _tally_approvals(list(forward.values()), plan_policies, now, hashes) if forward else {}
    # Read afresh, not from the claim: a cancel may have come in since.
    cancelled = cancelled_workflows(forward)
    results = {}
    for step in steps:
        step.bound_plan_hash = hashes[step.workflow_id, step.lane]
        checks = []
        known = actions.find(step.action) is not None
        checks.append(Check("action available", known, step.action if known else f"{step.action} is not installed"))
        policy = current[step.action]
        checks.append(
            Check(
                "action enabled",
                policy.enabled,
                f"policy v{policy.version}" + ("" if policy.enabled else ": switched off"),
            )
        )
        if step.lane:
            results[step.pk] = checks + _compensation_checks(step, now)
            comp = step.compensation_run
            step.approvers = approvers_out(
                [(comp.requested_by_id, comp.created_at), (comp.authorized_by_id, comp.decided_at)]
            )
            continue
        workflow = step.workflow
        checks.append(
            Check(
                NOT_CANCELLED,
                workflow.pk not in cancelled,
                CANCELLED if workflow.pk in cancelled else "the workflow goes on",
            )
        )
        checks.append(
            Check("deadline not passed", workflow.deadline > now, f"deadline {workflow.deadline:%Y-%m-%d %H:%M:%S} UTC")
        )
        unchanged = step.bound_plan_hash == workflow.plan_hash
        checks.append(
            Check(
                "plan as approved",
                unchanged,
                f"its stored steps hash to {step.bound_plan_hash[:12]}…"
                if unchanged
                else f"the plan no longer matches what was approved: its stored steps hash to "
                f"{step.bound_plan_hash[:12]}…, the approved plan to {workflow.plan_hash[:12]}…",
            )
        )
        required = approvals_required(plan_policies[workflow.pk])
        tally = tallies[workflow.pk]
        # The preview of this step that the latest approval still counting
        # was shown (and sealed): what a binding action's effect must still match.
        latest = tally.valid[0].preview_digests if tally.valid else {}
        step.bound_preview_digest = latest.get(step.key) if isinstance(latest, dict) else None
        names = ", ".join(sorted(a.reviewer.get_username() for a in tally.valid)) or "none"
        # An approval no person made stands for one approval of any reviewer
        # (docs/explanation/policies.md#approval-by-policy): not for a plan
        # whose rules ask for more, as they may since it was approved.
        standing = bool(tally.by_bases) and required == 1 and not reviewer_groups(plan_policies[workflow.pk])
        checks.append(
            Check(
                "approvals still valid",
                len(tally.valid) >= required or standing,
                f"approved by {', '.join(a.basis for a in tally.by_bases)} (sealed, still live, plan hash "
                "unchanged, within lifetime)"
                if standing and len(tally.valid) < required
                else f"{len(tally.valid)} of {required} required (valid: {names}; sealed, approver active, still a "
                f"reviewer{_in_groups(plan_policies[workflow.pk])}, plan hash unchanged, within lifetime)"
                f"{_set_aside(tally)}"
                + (
                    f"; {', '.join(a.basis for a in tally.by_bases)} stands for one approval of any reviewer, "
                    "not for what the plan's policies now ask"
                    if tally.by_bases and not standing
                    else ""
                ),
            )
        )
        # The proof names each approval that counts: a person by their
        # account's id, an approval no person made by its basis (a standing
        # grant's with its grantor's account id).
        counting = [(a.reviewer_id, a.created_at) for a in tally.valid]
        counting += [(a.basis, a.created_at, _grantor(a)) for a in tally.by_bases]
        step.approvers = approvers_out(counting)
        if step.gate:
            valid, need = gates.valid_approvals(step, workflow), gates.required(step)
            step.approvers += approvers_out((a.reviewer_id, a.created_at) for a in valid)
            checks.append(
                Check(
                    "gate approved",
                    len(valid) >= need,
                    f"{len(valid)} of {need} gate approvals valid (sealed, approver active, still a reviewer, plan "
                    "and the results before the gate as they were shown)",
                )
            )
        results[step.pk] = checks
    return results


def _in_groups(plan_policies) -> str:
    groups = sorted(reviewer_groups(plan_policies))
    return f" and still in {', '.join(groups)}" if groups else ""


def approvers_out(decisions) -> list[dict]:
    """`[{"sub", "at"}]` of (user id, time) pairs, oldest first: an opaque
    id (the account's primary key; never a name or an address) and when
    that person decided; for an approval no person made, its basis
    (`policy:<team>:<@id,...>@<version>`, `grant:<id>`) in place of the
    id, and a third item (a standing grant's `{"grantor": id}`) added to
    it. Pairs without either are left out."""
    return [
        {"sub": str(d[0]), "at": d[1].astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"), **(d[2] if len(d) > 2 else {})}
        for d in sorted((d for d in decisions if d[0] is not None and d[1] is not None), key=lambda d: d[1])
    ]


def _grantor(approval: Approval) -> dict:
    grantor = getattr(approval, "grantor", None)
    return {"grantor": str(grantor)} if grantor is not None else {}


def cancelled_workflows(workflow_ids) -> set:
    """Which of these workflows were cancelled. Inside the transaction that
    requests an attempt, read once the step rows are locked: a cancel locks
    them before the workflow (`locks`), so either the attempt commits first
    (its effect is then in flight, and listed) or this read sees the cancel."""
    # `updated_at` is read too, though unused: with only the key and the
    # status, both held by the status index, PostgreSQL without statistics
    # may answer from that whole index (an index-only scan of every plan)
    # rather than find these few rows by key.
    rows = Workflow.objects.filter(pk__in=sorted(workflow_ids)).values_list("pk", "status", "updated_at")
    return {pk for pk, status, _ in rows if status == WorkflowStatus.CANCELLED}


def _set_aside(tally: Tally) -> str:
    aside = [f"an approval no person made, whose basis is no longer live: {why}" for why in tally.dead or []]
    if tally.other_plan:
        aside.append(f"{tally.other_plan} for another plan (the plan no longer matches what was approved)")
    if tally.unsealed:
        aside.append(f"{tally.unsealed} whose seal does not verify (altered, or not recorded by the console)")
    return "; not counted: " + ", ".join(aside) if aside else ""


def _compensation_checks(step: Step, now) -> list[Check]:
    """An undo runs on its own authorization, not on the plan's approval:
    sealed for the undo steps as they are stored now (`binding`)."""
    comp = step.compensation_run
    authorizer = comp.authorized_by
    still_valid = (
        authorizer is not None and roles.is_reviewer(authorizer) and not persons.same(authorizer, comp.requested_by_id)
    )
    if comp.plan_hash != step.bound_plan_hash:
        authorized = f"{comp.plan_hash[:12]}…" if comp.plan_hash else "nothing sealed"
        bound = (
            f"the undo no longer matches what was authorized: its stored steps hash to "
            f"{step.bound_plan_hash[:12]}…, the authorized undo to {authorized}"
        )
    elif not binding.verifies(comp):
        bound = "the authorization's seal does not verify (altered, or not recorded by the console)"
    else:
        bound = ""
    return [
        Check(
            "compensation authorized",
            still_valid,
            f"authorized by {authorizer.get_username() if authorizer else 'nobody'}"
            + ("" if still_valid else ": no longer an active reviewer"),
        ),
        Check(
            "compensation as authorized",
            not bound,
            bound or f"its stored steps hash to {step.bound_plan_hash[:12]}…, sealed by the authorizer",
        ),
        Check(
            "deadline not passed",
            comp.deadline is not None and comp.deadline > now,
            f"compensation deadline {comp.deadline:%Y-%m-%d %H:%M:%S} UTC" if comp.deadline else "no deadline",
        ),
    ]


def cancelled_problem() -> list[str]:
    return problems([Check(NOT_CANCELLED, False, CANCELLED)])


def problems(checks: list[Check]) -> list[str]:
    return [f"{c.name}: {c.detail}" for c in checks if not c.ok]


def recheck(step: Step) -> list[str]:
    return problems(evaluate(step))


EDITABLE = (
    "enabled",
    "risk",
    "approvals_required",
    "approval_ttl_seconds",
    "max_attempts",
    "max_in_flight",
    "rate_per_second",
    "review_deadline_seconds",
    "review_reminder_seconds",
    "escalation_group",
    "reviewer_group",
    "chat_decisions",
)


def update(action: str, *, by, reason: str = "", context: dict | None = None, **changes) -> ActionPolicy:
    """Change an action's policy: a new version, audited with what changed
    (and from what). The one place a policy version is written; who may
    change what is `workflows.operations.policies`. `context` joins the
    audit event (for example the request an authorization applies)."""
    from django.db.models import F

    from workflows.audit import journal

    unknown = set(changes) - set(EDITABLE)
    if unknown:
        raise ValueError(f"not editable: {sorted(unknown)}")
    current = policy_for(action)
    with transaction.atomic():
        before = ActionPolicy.objects.select_for_update().get(pk=current.pk)
        ActionPolicy.objects.filter(pk=current.pk).update(
            version=F("version") + 1, updated_by=_actor(by), updated_at=timezone.now(), **changes
        )
        current.refresh_from_db()
        data = {
            "action": action,
            "version": current.version,
            "changed": changes,
            "previous": {name: getattr(before, name) for name in changes},
        }
        if reason:
            data["reason"] = reason
        journal.append(
            actor=by,
            verb="policy.changed",
            obj_type="action_policy",
            obj_id=current.pk,
            data={**data, **(context or {})},
        )
    return current


def _actor(user) -> str:
    from workflows.audit.journal import actor_name

    return actor_name(user)
