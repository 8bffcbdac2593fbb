"""What every decision checks, in one place (docs/approval-guarantees.md):
a decision names what its decider saw, and it is recorded only
if that is still what stands, by someone eligible, who is not one of the
people who wrote or asked for what is decided.

Each decision operation (a plan's approval or rejection, a gate's, a
compensation's authorization or decline, a link's or a chat's click, one
item of a bulk call) locks its rows first and then calls these checks, once
each, inside the transaction that records it; nothing is checked before
the lock, so no decision is recorded on what changed between a check and
its write.
"""

from __future__ import annotations

from dataclasses import dataclass

from workflows import persons, roles
from workflows.engine import policy
from workflows.errors import DomainError, NotAllowed, StaleRevision
from workflows.models import Workflow


@dataclass(frozen=True)
class Seen:
    """What the decider saw: the plan's revision and hash; the previews'
    digests (`{step key: digest}`) where the plan has previews; the digest
    of the results before a gate at a gate. A compensation's decider names
    only its `plan_hash`."""

    revision: int | None = None
    plan_hash: str | None = None
    preview_digests: dict[str, str] | None = None
    results_digest: str | None = None

    @classmethod
    def current(cls, workflow, *, gate_step: str | None = None) -> Seen:
        """What the plan shows now: for tools that decide on what they have
        just read (the demo, the bench), never for a person's click."""
        from workflows.engine import gates
        from workflows.states import PreviewState

        fresh = Workflow.objects.get(pk=getattr(workflow, "pk", workflow))
        digests = dict(
            fresh.steps.filter(lane=0, preview_state=PreviewState.READY).values_list("key", "preview_digest")
        )
        step = fresh.steps.get(lane=0, key=gate_step) if gate_step else None
        return cls(
            revision=fresh.revision,
            plan_hash=fresh.plan_hash,
            preview_digests=digests,
            results_digest=gates.results_digest(step) if step is not None else None,
        )


class SeenMissing(DomainError):
    """A decision that does not name what it decides on."""

    code = "invalid"


def require(seen: Seen, *names: str) -> None:
    """400 naming each of `names` the decision left out."""
    missing = {
        name: "Required: name what you decided on (read it from the object first)."
        for name in names
        if getattr(seen, name) is None
    }
    if missing:
        raise SeenMissing(f"A decision names what it decides on: {', '.join(missing)} missing.", fields=missing)


def current_plan(locked: Workflow, seen: Seen) -> None:
    """409 `stale_revision` unless the decider saw the plan's current
    revision and hash."""
    require(seen, "revision", "plan_hash")
    if seen.revision != locked.revision or seen.plan_hash != locked.plan_hash:
        raise StaleRevision(
            f"The plan changed since you looked: you saw revision {seen.revision}, it is now revision "
            f"{locked.revision}. Review the current revision, then decide again; nothing was recorded.",
            details={"current": {"revision": locked.revision, "plan_hash": locked.plan_hash}},
        )


def eligible_reviewer(
    workflow: Workflow, user, what: str, *, approving: bool, editors_too: bool, plan_policies=None
) -> str:
    """403 unless `user` is a reviewer, in every reviewer group the plan's
    policies name (`approving`: to approve or to edit; `policy.plan_rules`), and not its
    submitter, nor (`editors_too`) an editor of any revision: four eyes, by
    person. 404 for a plan outside their teams. The decider's person key."""
    workflow.require_visible_to(user)
    if not roles.is_reviewer(user):
        raise NotAllowed(f"Only reviewers can {what}.")
    if approving:
        outside = policy.outside_reviewer_groups(workflow, user, plan_policies)
        if outside:
            rules = "; ".join(f"{action} needs a member of {group}" for action, group in outside)
            raise NotAllowed(
                f"You cannot {what}: its policies name the reviewers who may ({rules}), and you are not in that group."
            )
    authors = persons.plan_authors([workflow])[workflow.pk]
    people = persons.keys_of(authors | {user.pk}, remember=user)
    me = people[user.pk]
    if me == people[workflow.submitted_by_id]:
        raise NotAllowed(
            "A plan cannot be reviewed by the user who submitted it. Nor by the person who owns the "
            "agent that did: another person decides (four eyes)."
        )
    if editors_too and me in {people[pk] for pk in authors}:
        raise NotAllowed(
            f"You cannot {what}: you edited a revision of this plan, and as its co-author you are "
            "one of its authors (four eyes: another person decides)."
        )
    return me
