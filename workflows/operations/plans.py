"""Accepting a plan from an agent: validate everything, store it PLANNED.

The plan is untrusted input. It is checked as a whole before anything is
written and stored exactly as submitted: a credential in it is refused, not
rewritten (secrets travel as `{"$secret": NAME}` references, resolved only
by the worker). It is deduplicated by the submitter's `submission_key` so
an agent that retries its submission gets the same workflow back.
"""

import re
import uuid
from dataclasses import dataclass
from datetime import timedelta

from django.conf import settings
from django.contrib.auth.models import Group
from django.db import IntegrityError, transaction
from django.utils import timezone

from workflows import actions, queue, teams
from workflows.audit import journal, secrets
from workflows.audit.redaction import credential_fields, find_credential, redact
from workflows.chat import marks as chat
from workflows.db import canonical_json, sha256_hex
from workflows.engine import binding, choices, policy, previews
from workflows.engine.transitions import move
from workflows.models import Approval, ReviewNotice, Step, Workflow, operation_key_for
from workflows.operations import grants as standing
from workflows.operations import policy_sets, tokens
from workflows.policy import evaluation as policy_evaluation
from workflows.states import PreviewState, WorkflowStatus
from workflows.webhooks import keys, outbound

STEP_KEY = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]{0,63}$")
MAX_STEPS = 50
MAX_DEADLINE_SECONDS = 30 * 24 * 3600


class PlanInvalid(Exception):
    def __init__(self, fields: dict[str, str]):
        super().__init__("The plan is not valid.")
        self.fields = fields


class SubmissionConflict(Exception):
    """The submission key was already used for a different plan."""


@dataclass
class Submission:
    workflow: Workflow
    created: bool


def validate(body: dict) -> dict[str, str]:
    """Field errors keyed by dotted path (`steps.1.action`); empty when valid."""
    errors: dict[str, str] = {}
    steps = body.get("steps") or []
    if not steps:
        errors["steps"] = "A plan needs at least one step."
    if len(steps) > MAX_STEPS:
        errors["steps"] = f"A plan may have at most {MAX_STEPS} steps."
    deadline = body.get("deadline_seconds")
    if deadline is not None and not (1 <= deadline <= MAX_DEADLINE_SECONDS):
        errors["deadline_seconds"] = f"Must be between 1 and {MAX_DEADLINE_SECONDS}."
    if callback := body.get("callback_url"):
        if message := outbound.url_problem(callback):
            errors["callback_url"] = message
    if body.get("review") is not None:
        _add(errors, _review_errors(body["review"], deadline or settings.DEFAULT_DEADLINE_SECONDS))
    for field in ("name", "submission_key"):
        if kind := find_credential(body.get(field) or ""):
            errors[field] = f"This looks like a credential ({kind}): remove it."
    seen: list[str] = []
    gates: dict[str, dict] = {}  # the earlier steps' gates, by key (`when`, `$decision`)
    branches: dict[str, dict] = {}  # the earlier steps' `when`, by key
    for index, step in enumerate(steps):
        where = f"steps.{index}"
        key = step["key"]
        if not STEP_KEY.match(key):
            errors[f"{where}.key"] = "Use 1-64 letters, digits, '.', '_' or '-', starting with a letter or digit."
        elif key in seen:
            errors[f"{where}.key"] = f"Duplicate step key {key!r}."
        elif kind := find_credential(key):
            errors[f"{where}.key"] = f"This looks like a credential ({kind}): remove it."
        try:
            action = actions.get(step["action"])
        except KeyError:
            errors[f"{where}.action"] = f"Unknown action. Known actions: {', '.join(actions.names())}."
            action = None
        if action is not None:
            _add(errors, actions.field_errors(action.Args, step["args"], f"{where}.args"))
        _add(errors, credential_fields(step["args"], f"{where}.args"))
        _add(errors, secrets.check(step["args"], action, f"{where}.args"))
        for path, ref in _references(step["args"], f"{where}.args"):
            source, _, rest = ref.partition(".result")
            if source not in seen or (rest and not rest.startswith(".")):
                _add(errors, {path: "A $from reference must name an earlier step: '<step key>.result.<field>'."})
            elif branches.get(source) and branches[source] != step.get("when"):
                _add(errors, {path: choices.OTHER_BRANCH})
        _add(errors, choices.reference_errors(step["args"], gates, f"{where}.args", branches, step.get("when")))
        if step.get("when") is not None:
            _add(errors, choices.when_errors(step["when"], gates, f"{where}.when"))
        if step.get("gate") is not None:
            _add(errors, _gate_errors(step["gate"], index, f"{where}.gate"))
            if isinstance(step["gate"], dict):
                gates[key] = step["gate"]
        compensation = step.get("compensation")
        if compensation is not None:
            undo = actions.find(compensation["action"])
            undo_args = compensation.get("args") or {}
            if undo is None:
                errors[f"{where}.compensation.action"] = "Unknown action."
            else:
                _add(errors, actions.field_errors(undo.Args, undo_args, f"{where}.compensation.args"))
            _add(errors, credential_fields(undo_args, f"{where}.compensation.args"))
            _add(errors, secrets.check(undo_args, undo, f"{where}.compensation.args"))
        seen.append(key)
        if isinstance(step.get("when"), dict):
            branches[key] = step["when"]
    return errors


MAX_GATE_APPROVALS = 10
MAX_REMINDERS = 5


REVIEW_FIELDS = ("deadline_seconds", "remind_before_seconds", "escalate_to", "on_expiry", "extend_seconds")
ON_EXPIRY = ("expire", "escalate")


def _review_errors(review, plan_deadline: int) -> dict[str, str]:
    """`{"deadline_seconds": s, "remind_before_seconds": [...], "escalate_to":
    group, "on_expiry": "expire"|"escalate", "extend_seconds": s}`: a review
    deadline before the plan's own (when it expires), reminders before the
    review deadline, the group told once it passed, and what the plan's own
    deadline does (docs/explanation/review.md#on-expiry)."""
    if not isinstance(review, dict):
        return {"review": "An object: {" + ", ".join(f'"{name}"' for name in REVIEW_FIELDS) + "}."}
    errors = {
        f"review.{name}": f"Unknown field: review has {', '.join(REVIEW_FIELDS[:-1])} and {REVIEW_FIELDS[-1]}."
        for name in sorted(set(review) - set(REVIEW_FIELDS))
    }
    deadline = review.get("deadline_seconds")
    if type(deadline) is not int or not 1 <= deadline < plan_deadline:
        errors["review.deadline_seconds"] = (
            f"Whole seconds from submission, at least 1 and before the plan's own "
            f"deadline ({plan_deadline} s), when it expires."
        )
        deadline = None
    before = review.get("remind_before_seconds", [])
    if (
        not isinstance(before, list)
        or len(before) > MAX_REMINDERS
        or any(type(item) is not int or item < 1 or (deadline is not None and item >= deadline) for item in before)
    ):
        errors["review.remind_before_seconds"] = (
            f"Up to {MAX_REMINDERS} whole numbers of seconds before the review "
            "deadline, each at least 1 and less than it."
        )
    elif len(set(before)) != len(before):
        errors["review.remind_before_seconds"] = "Each reminder time once."
    group = review.get("escalate_to")
    if group is not None and (not isinstance(group, str) or not Group.objects.filter(name=group).exists()):
        errors["review.escalate_to"] = "The name of an existing group, told when the review deadline passes."
    errors.update(_on_expiry_errors(review))
    return errors


def _on_expiry_errors(review: dict) -> dict[str, str]:
    """`"escalate"` hands the plan once to `escalate_to` and extends its
    deadline by `extend_seconds`; `"expire"` (the default) ends it EXPIRED."""
    on_expiry = review.get("on_expiry", "expire")
    if on_expiry not in ON_EXPIRY:
        return {"review.on_expiry": '"expire" (the default: the plan ends EXPIRED) or "escalate".'}
    extend = review.get("extend_seconds")
    if on_expiry == "expire":
        if "extend_seconds" in review:
            return {"review.extend_seconds": 'Only with "on_expiry": "escalate".'}
        return {}
    errors = {}
    if review.get("escalate_to") is None:
        errors["review.escalate_to"] = 'Required with "on_expiry": "escalate": the group the plan goes to.'
    if type(extend) is not int or not 1 <= extend <= MAX_DEADLINE_SECONDS:
        errors["review.extend_seconds"] = (
            f'Required with "on_expiry": "escalate": whole seconds the deadline is extended by, '
            f"1 to {MAX_DEADLINE_SECONDS}."
        )
    return errors


def _gate_errors(gate, index: int, where: str) -> dict[str, str]:
    """A gate is `{"approvals": 1..10, "note": text}`, on any step but the
    first (the plan's own approval already stands before that one), with
    `options` and an `input_schema` when typed (`choices.gate_errors`)."""
    if index == 0:
        return {where: "The first step cannot carry a gate: the plan's approval already stands before it."}
    if not isinstance(gate, dict):
        return {where: 'A gate is {"approvals": N, "note": "..."}.'}
    errors = choices.gate_errors(gate, where)
    for name in sorted(set(gate) - {"approvals", "note", "options", "input_schema"}):
        errors[f"{where}.{name}"] = "Unknown field: a gate has approvals, note, options and input_schema."
    approvals = gate.get("approvals")
    if type(approvals) is not int or not 1 <= approvals <= MAX_GATE_APPROVALS:
        errors[f"{where}.approvals"] = f"A whole number of approvals, 1 to {MAX_GATE_APPROVALS}."
    note = gate.get("note", "")
    if not isinstance(note, str) or len(note) > 2000:
        errors[f"{where}.note"] = "Text of at most 2000 characters."
    elif kind := find_credential(note):
        errors[f"{where}.note"] = f"This looks like a credential ({kind}): remove it."
    return errors


def _add(errors: dict[str, str], more: dict[str, str]) -> None:
    """The first error found at a path is the one reported: the action's
    own model speaks before the checks every action shares."""
    for path, message in more.items():
        errors.setdefault(path, message)


def _references(value, path):
    if actions.is_reference(value):
        yield path, value[actions.FROM]
    elif isinstance(value, dict):
        for key, item in value.items():
            yield from _references(item, f"{path}.{key}")
    elif isinstance(value, list):
        for index, item in enumerate(value):
            yield from _references(item, f"{path}.{index}")


def canonical_plan(steps: list[dict]) -> list[dict]:
    """The steps as hashed and stored: exactly as submitted."""
    return [
        {
            "key": step["key"],
            "action": step["action"],
            "args": step["args"],
            "compensation": step["compensation"] if step.get("compensation") else None,
            # Only on a gated step: a plan without gates is stored and hashed as it always was.
            **({"gate": step["gate"]} if step.get("gate") else {}),
            **({"when": step["when"]} if step.get("when") else {}),
        }
        for step in steps
    ]


# The team a plan submitted by a user belongs to (kept under this name for its callers).
submitting_team = tokens.submitting_team


def submit(user, body: dict) -> Submission:
    """Record a plan as PLANNED, or return the workflow this submission
    already created. Raises PlanInvalid or SubmissionConflict. The plan
    belongs to the submitting token's team (`submitting_team`)."""
    errors = validate(body)
    if body.get("callback_url") and "callback_url" not in errors and not keys.has_secret(user):
        errors["callback_url"] = (
            "Your account has no webhook signing secret: an operator runs "
            "`manage.py webhook_secret <your username>` and gives it to you."
        )
    team = submitting_team(user)
    escalate_to = body["review"].get("escalate_to") if isinstance(body.get("review"), dict) else None
    if escalate_to and "review.escalate_to" not in errors and not teams.eligible_group(escalate_to, team.pk):
        errors["review.escalate_to"] = (
            f"{escalate_to} has no member of this plan's team ({team.name}): escalate to a group of your team."
        )
    if errors:
        raise PlanInvalid(errors)
    plan = canonical_plan(body["steps"])
    plan_hash = binding.plan_hash(plan, body.get("review"))
    context = redact(body.get("context") or {}, prompts=True)
    deadline_seconds = body.get("deadline_seconds") or settings.DEFAULT_DEADLINE_SECONDS
    callback_url = body.get("callback_url") or ""
    hashed = {"name": body["name"], "plan": plan, "context": context, "deadline_seconds": deadline_seconds}
    if callback_url:
        # Only when given: submissions hashed before callbacks existed still match.
        hashed["callback_url"] = callback_url
    review = body.get("review")
    if review is not None:
        hashed["review"] = review
    submission_hash = sha256_hex(canonical_json(hashed))
    existing = _existing(user, body["submission_key"], submission_hash)
    if existing:
        return Submission(existing, created=False)
    # The team's Cedar policies (docs/explanation/policies.md#evaluation): a
    # forbid, or a policy that errors, refuses the plan before anything is
    # written; a plan every step of which they permit `auto_approve` is
    # approved by them with it (docs/explanation/policies.md#approval-by-policy),
    # and so is one whose other steps the agent's standing grants approve
    # (docs/explanation/policies.md#standing-grants).
    workflow_id = uuid.uuid4()
    judged = policy_sets.evaluate({"steps": plan}, agent=user.get_username(), team=team.name, workflow=str(workflow_id))
    judged.enforce()
    decided = policy_decisions(judged)
    now = timezone.now()
    shown = [previews.initial_state(actions.find(step["action"]), step["args"]) for step in plan]
    try:
        with transaction.atomic():
            workflow = Workflow.objects.create(
                id=workflow_id,
                name=body["name"],
                submitted_by=user,
                team=team,
                submission_key=body["submission_key"],
                submission_hash=submission_hash,
                plan=plan,
                plan_hash=plan_hash,
                context=context,
                callback_url=callback_url,
                review=review,
                policy_asks=judged.asks,
                deadline=now + timedelta(seconds=deadline_seconds),
                created_at=now,
                updated_at=now,
                previews_due_at=now if PreviewState.PENDING in shown else None,
            )
            steps = Step.objects.bulk_create(
                Step(
                    workflow=workflow,
                    position=index,
                    key=step["key"],
                    action=step["action"],
                    args=step["args"],
                    compensation=step["compensation"],
                    gate=step.get("gate"),
                    when=step.get("when"),
                    operation_key=operation_key_for(workflow.id, step["key"]),
                    preview_state=shown[index],
                    policy_decision=decided.get(step["key"]),
                )
                for index, step in enumerate(plan)
            )
            # Approvals bind to the hash every claim recomputes: that of the
            # steps as the database gives them back (PostgreSQL's jsonb
            # returns 1e+16 as an integer and -0.0 as 0.0).
            plan_hash = binding.stored_hashes([(workflow.pk, 0)])[workflow.pk, 0]
            if plan_hash != workflow.plan_hash:
                Workflow.objects.filter(pk=workflow.pk).update(plan_hash=plan_hash)
                workflow.plan_hash = plan_hash
            journal.append(
                actor=user,
                verb="workflow.submitted",
                obj_type="workflow",
                obj_id=workflow.pk,
                workflow_id=workflow.pk,
                data={"name": workflow.name, "plan_hash": plan_hash, "steps": len(plan), "to": workflow.status},
            )
            # After the submission in its audit stream: the grants' uses.
            if granted := _take_grants(user, team, plan, judged, workflow.pk):
                decided = policy_decisions(judged, granted)
                for step in steps:
                    step.policy_decision = decided[step.key]
                Step.objects.bulk_update(steps, ["policy_decision"])
            if judged.basis is not None or granted:
                _approve_without_person(workflow, steps, judged, granted)
            else:
                if (chosen := review if review is not None else _policy_review(plan, deadline_seconds)) is not None:
                    _schedule_notices(workflow, chosen)
                chat.opened(workflow, "plan")
                # The reviewers' first notice: a row sent by whichever notices
                # task runs first (`notifications.send_due`), and its wake-up,
                # both committed or rolled back with the submission.
                ReviewNotice.objects.create(
                    workflow=workflow,
                    kind=ReviewNotice.Kind.NOTICE,
                    due_at=workflow.created_at,
                    deadline=workflow.deadline,
                )
                queue.enqueue("workflows.tasks.send_review_notices", name="review notices")
            if workflow.previews_due_at is not None:
                # A worker takes them (`previews.compute_due`): a remote read never runs in a web request.
                queue.enqueue(previews.TASK, name="previews")
    except IntegrityError:
        # A concurrent submission with the same key won the race.
        existing = _existing(user, body["submission_key"], submission_hash)
        if existing:
            return Submission(existing, created=False)
        raise
    return Submission(workflow, created=True)


# Why a step goes to a person that a standing grant may answer: no permit
# of the team's set approves it (none at all, or none that allows a
# destructive step). Never a forbid, an error, a policy that read a
# run-time value, nor a permit that asks people for it.
GRANTABLE = (
    policy_evaluation.NO_POLICY_SET,
    policy_evaluation.NO_PERMIT,
    policy_evaluation.DESTRUCTIVE,
)


def _by_policy(s: policy_evaluation.StepDecision) -> bool:
    """Whether the team's set approves this step by itself (a basis to name)."""
    return s.decision == policy_evaluation.AUTO and s.basis is not None


def _policy_basis(judged) -> str | None:
    """The basis of the approval by the team's set of the steps it approves
    by itself (`evaluation.basis`); the plan's own when it approves all."""
    policed = [s for s in judged.steps if _by_policy(s)]
    if not policed:
        return None
    return policy_evaluation.basis(judged.team, judged.version, [p for s in policed for p in s.policies])


def _grantable(s: policy_evaluation.StepDecision) -> bool:
    if s.approvals or s.group:
        # A permit of `submit` asked people for it.
        return False
    if s.decision == policy_evaluation.AUTO:
        # Permitted by the global set alone: no team set version to name.
        return s.basis is None
    return s.decision == policy_evaluation.HUMAN and s.reason in GRANTABLE


class _NotCovered(Exception):
    """Rolls back the grant uses taken for a plan that still needs a person."""


def _take_grants(user, team, plan: list[dict], judged, workflow_id) -> dict[str, object]:
    """{step key: the standing grant that approves it} for each step the
    team's policies leave to a person, when a live grant of `user` approves
    every one of them, one use of each counted for the step's operation key;
    {} when any step still needs a person, and then no use is counted (the
    uses are taken in a savepoint of the submission, rolled back)."""
    wanting = [s for s in judged.steps if not _by_policy(s)]
    if not wanting or not all(_grantable(s) for s in wanting):
        return {}
    by_key = {step["key"]: step for step in plan}
    # A grant stands for one approval of any reviewer: never for an action
    # whose policy asks for more (docs/explanation/policies.md#approval-by-grant).
    rules = policy.policies_for({by_key[s.key]["action"] for s in wanting})
    if any(r.approvals_required > 1 or r.reviewer_group for r in rules.values()):
        return {}
    taken = {}
    try:
        with transaction.atomic():
            for s in wanting:
                grant = standing.take(
                    user,
                    by_key[s.key],
                    team=team.name,
                    operation_key=operation_key_for(workflow_id, s.key),
                    workflow_id=workflow_id,
                    steps_in_plan=len(plan),
                )
                if grant is None:
                    raise _NotCovered
                taken[s.key] = grant
    except _NotCovered:
        return {}
    return taken


def policy_decisions(
    judged: policy_evaluation.Evaluation, granted: dict | None = None, *, revised: bool = False
) -> dict[str, dict]:
    """What the policies found for each step, as `Step.policy_decision`
    keeps it: who approves it (`policy` or `grant` only when no step of the
    plan needs a person), why, and which policies and set version decided;
    a step a standing grant approves names the grant and its grantor.
    `revised`: judged again after a reviewer's edit, when people approve
    it whatever the policies would allow."""
    granted = granted or {}
    without_person = not revised and (judged.basis is not None or bool(granted))
    policy_basis = _policy_basis(judged) if granted else judged.basis
    waiting = [s.key for s in judged.steps if not _by_policy(s) and s.key not in granted]
    found = {}
    for s in judged.steps:
        why = s.why
        grant = granted.get(s.key)
        if grant is not None:
            grantor = grant.granted_by.get_username()
            why = f"approved by standing grant {grant.pk}, granted by {grantor} ({why})"
        elif s.decision == policy_evaluation.AUTO and revised:
            why += "; but the plan was edited in review, and people approve it"
        elif s.decision == policy_evaluation.AUTO and not without_person:
            why += f"; but the plan waits for a person, as step {', '.join(waiting)} needs one"
        found[s.key] = {
            "by": ("grant" if grant is not None else "policy") if without_person else "human",
            "decision": s.decision,
            "reason": s.reason,
            "policies": s.policies,
            "version": judged.version,
            "approvals": s.approvals,
            "group": s.group,
            "groups": s.groups,
            "basis": grant.basis if grant is not None else (policy_basis if _by_policy(s) else None),
            "why": why,
            **({"grantor": grant.granted_by.get_username()} if grant is not None else {}),
        }
    return found


def _approve_without_person(workflow: Workflow, steps: list[Step], judged, granted: dict) -> None:
    """Approve the plan by what approved each of its steps, in the
    transaction that records it: the team's policies, with the basis
    naming the set version and every permit that approved a step, and each
    standing grant that approved one. One sealed approval per basis, naming
    it and no person; they stand together (`engine.policy`): the plan runs
    while every one is live, checked again before each attempt
    (`engine.bases`). Then the move to APPROVED and the first step made due."""
    policy_basis = _policy_basis(judged)
    grant_bases = list(dict.fromkeys(grant.basis for grant in granted.values()))
    for basis in [*([policy_basis] if policy_basis else []), *grant_bases]:
        binding.seal(
            Approval(
                workflow=workflow,
                reviewer=None,
                basis=basis,
                decision=Approval.Decision.APPROVE,
                plan_hash=workflow.plan_hash,
                revision=workflow.revision,
                preview_digests={},
            )
        ).save()
    data = {
        "plan_hash": workflow.plan_hash,
        "revision": workflow.revision,
        "version": judged.version,
        "policies": {s.key: s.policies for s in judged.steps if _by_policy(s)},
    }
    if not granted:
        # The audit's actor names the set version (its column is short); the data the whole basis.
        actor, verb = f"policy:{judged.team}@{judged.version}", "workflow.approved_by_policy"
        data["basis"] = policy_basis
    else:
        # The first grant names the actor; the data every basis, step by step, and each grantor.
        actor, verb = grant_bases[0], "workflow.approved_by_grant"
        data["bases"] = {s.key: granted[s.key].basis if s.key in granted else policy_basis for s in judged.steps}
        data["grantors"] = {grant.basis: grant.granted_by.get_username() for grant in granted.values()}
    move(workflow, WorkflowStatus.APPROVED, actor=actor, verb=verb, data=data)
    Step.objects.filter(pk=steps[0].pk).update(next_attempt_at=timezone.now())
    queue.wake(workflow)


def _policy_review(plan: list[dict], deadline_seconds: int) -> dict | None:
    """A plan that sets no review gets the strictest of its actions'
    policies: the shortest review deadline, with that policy's reminder and
    escalation group; none when it would come after the plan expires."""
    current = policy.policies_for({step["action"] for step in plan})
    setting = [rules for rules in current.values() if rules.review_deadline_seconds]
    if not setting:
        return None
    rules = min(setting, key=lambda item: (item.review_deadline_seconds, item.action))
    if rules.review_deadline_seconds >= deadline_seconds:
        return None
    review = {"deadline_seconds": rules.review_deadline_seconds}
    if rules.review_reminder_seconds and rules.review_reminder_seconds < rules.review_deadline_seconds:
        review["remind_before_seconds"] = [rules.review_reminder_seconds]
    if rules.escalation_group:
        review["escalate_to"] = rules.escalation_group
    return review


def _schedule_notices(workflow: Workflow, review: dict) -> None:
    """The plan's reminders and its escalation, as rows to send when due."""
    deadline = workflow.created_at + timedelta(seconds=review["deadline_seconds"])
    notices = [
        ReviewNotice(
            workflow=workflow,
            kind=ReviewNotice.Kind.REMINDER,
            deadline=deadline,
            due_at=deadline - timedelta(seconds=s),
        )
        for s in review.get("remind_before_seconds", [])
    ]
    notices.append(
        ReviewNotice(
            workflow=workflow,
            kind=ReviewNotice.Kind.ESCALATION,
            due_at=deadline,
            deadline=deadline,
            group=review.get("escalate_to") or "",
        )
    )
    ReviewNotice.objects.bulk_create(notices)


def _existing(user, submission_key: str, submission_hash: str) -> Workflow | None:
    workflow = Workflow.objects.filter(submitted_by=user, submission_key=submission_key).first()
    if workflow is not None and workflow.submission_hash != submission_hash:
        raise SubmissionConflict(f"submission_key {submission_key!r} was already used for a different plan")
    if workflow is not None and not workflow.is_visible_to(user):
        # Submitted through another team's token: not this token's to read.
        raise SubmissionConflict(f"submission_key {submission_key!r} was already used with another team's token")
    return workflow
