"""Plan binding (docs/explanation/trust-core.md#plan-binding): an approval grants exactly the plan it saw.

The plan hash is recomputed from the stored steps whenever a step is claimed,
never taken from a stored column, so a step whose args were edited in the
database no longer matches what was approved. Each approval is sealed with a
MAC under the audit key (`workflows.audit.keys`, which never lives in the database)
over what was decided, so a writer who also rewrites the stored hashes, or
inserts an approval of their own, is caught as well: without the key they
cannot seal another plan. A compensation's authorization is sealed the same
way, over the undo steps it allowed.
"""

from __future__ import annotations

import hmac
from datetime import UTC

from workflows.audit import keys
from workflows.db import canonical_json, sha256_hex
from workflows.models import Approval, Compensation, Step, Workflow


def entry(key: str, action: str, args, compensation, gate=None, when=None) -> dict:
    """One step as the plan hash covers it: the shape plans were always
    hashed in (`plans.canonical_plan`), so hashes stored before binding was
    checked stay valid. A step's `gate` (docs/explanation/review.md#review) and its `when`
    (docs/explanation/review.md#typed-decisions) join it only when the step has them: a plan
    without them hashes as it always did."""
    found = {"key": key, "action": action, "args": args, "compensation": compensation or None}
    if gate:
        found["gate"] = gate
    if when:
        found["when"] = when
    return found


def plan_hash(entries: list[dict], review: dict | None = None) -> str:
    """SHA-256 of the steps' entries; a plan's `review` (its deadline,
    reminders, escalation) joins them as a last entry when it has one
    (docs/explanation/review.md#typed-decisions): a plan without one hashes as it always did."""
    return sha256_hex(canonical_json(entries + [{"review": review}] if review is not None else entries))


def stored_hashes(lanes, manager=None, workflows=None, reviews: dict | None = None) -> dict[tuple, str]:
    """The plan hash of the stored steps of each `(workflow id, lane)`, in
    one query whatever their number, and lane 0's with its workflow's
    `review`. Lane 0 is the plan reviewers approved; a compensation's lane
    is the undo its authorizer allowed. (`manager`, `workflows`: the Step
    and Workflow managers to read, a migration's historical ones; with a
    historical Step manager and no Workflow one, no review is read.
    `reviews`: the `review` of each lane 0's workflow, by id, when the
    caller holds its row (it is set at submission and never changes); read
    here otherwise.)"""
    lanes = set(lanes)
    if not lanes:
        return {}
    steps = (Step.objects if manager is None else manager).filter(
        workflow_id__in={workflow for workflow, _ in lanes}, lane__in={lane for _, lane in lanes}
    )
    names = {field.name for field in (Step if manager is None else manager.model)._meta.get_fields()}
    extra = tuple(name for name in ("gate", "when") if name in names)
    columns = ("workflow_id", "lane", "key", "action", "args", "compensation") + extra
    plans: dict[tuple, list[dict]] = {lane: [] for lane in lanes}
    for workflow_id, lane, key, action, args, compensation, *more in steps.order_by("position").values_list(*columns):
        if (workflow_id, lane) in plans:
            plans[workflow_id, lane].append(entry(key, action, args, compensation, **dict(zip(extra, more))))
    if workflows is None and manager is None:
        workflows = Workflow.objects
    if reviews is None:
        reviews = (
            dict(
                workflows.filter(pk__in={w for w, lane in lanes if lane == 0}, review__isnull=False).values_list(
                    "pk", "review"
                )
            )
            if workflows is not None and any(lane == 0 for _, lane in lanes)
            else {}
        )
    return {
        (workflow_id, lane): plan_hash(entries, reviews.get(workflow_id) if lane == 0 else None)
        for (workflow_id, lane), entries in plans.items()
    }


def compensation_hash(plan: list[dict]) -> str:
    """The plan hash of a compensation's undo steps (`Compensation.plan`),
    as `stored_hashes` recomputes it from its lane once they are stored."""
    return plan_hash([entry(item["key"], item["action"], item["args"], None) for item in plan])


def sealed_text(record: Approval | Compensation) -> str:
    """What a record's MAC covers: for an approval, what the reviewer
    decided on; for a compensation, the undo its authorizer allowed. The
    `seal` label keeps a MAC made for one kind of record (or for anything
    else signed with the audit key) from passing for another."""
    if record._meta.model_name == "gateapproval":
        return canonical_json(
            {
                "seal": "gate",
                "workflow": str(record.workflow_id),
                "step": record.step_id,
                "plan_hash": record.plan_hash,
                "results": record.results_digest,
                "reviewer": record.reviewer_id,
                "decision": record.decision,
                "at": _instant(record.created_at),
                # Only at a typed gate: seals made before typed decisions stay valid.
                **({"choice": record.choice} if getattr(record, "choice", "") else {}),
                **({"input": record.input} if getattr(record, "input", None) is not None else {}),
            }
        )
    if record._meta.model_name == "compensation":  # also a migration's historical model
        return canonical_json(
            {
                "seal": "compensation",
                "workflow": str(record.workflow_id),
                "compensation": str(record.pk),
                "lane": record.lane,
                "plan_hash": record.plan_hash,
                "requested_by": record.requested_by_id,
                "authorized_by": record.authorized_by_id,
                "at": _instant(record.decided_at),
            }
        )
    return canonical_json(
        {
            "seal": "approval",
            "workflow": str(record.workflow_id),
            # The seal names the revision so that an approval of one revision
            # can never pass for another (a migration's historical model may
            # predate the field: its approvals were of revision 1).
            "revision": getattr(record, "revision", 1),
            "plan_hash": record.plan_hash,
            "reviewer": record.reviewer_id,
            "decision": record.decision,
            "at": _instant(record.created_at),
            "previews": _previews(record),
            # Only for an approval no person made: seals made before bases stay valid.
            **({"basis": record.basis} if getattr(record, "basis", "") else {}),
        }
    )


def _previews(approval) -> list:
    """The previews the reviewer was shown, as [step key, digest] in key
    order: none before previews existed, so those seals stay valid. (A
    migration's historical model may predate the field; a value that is not
    what the console writes is sealed as it is, and so never verifies.)"""
    digests = getattr(approval, "preview_digests", None) or {}
    if not isinstance(digests, dict):
        return [["not a mapping", canonical_json(digests)]]
    return sorted([str(key), digests[key]] for key in digests)


def _instant(at) -> str | None:
    return at.astimezone(UTC).isoformat(timespec="microseconds") if at else None


def seal(record, key: keys.AuditKey | None = None):
    """Set the record's MAC under the current audit key (or `key`)."""
    key = key or keys.current()
    record.key_id, record.mac = key.kid, key.mac(sealed_text(record))
    return record


def verifies(record) -> bool:
    """The record was sealed by a key still in AUDIT_KEYS and nothing its
    MAC covers has changed since."""
    key = keys.by_id(record.key_id) if record.key_id else None
    # As bytes: compare_digest refuses a str that is not ASCII, and the
    # stored value is whatever the database holds.
    return key is not None and hmac.compare_digest(key.mac(sealed_text(record)).encode(), record.mac.encode())
