"""Plan binding (DESIGN §18.3): an approval grants exactly the plan it saw.

The plan hash is recomputed from the stored steps whenever a step is claimed,
never taken from a stored column, so a step whose args were edited in the
database no longer matches what was approved. Each approval is sealed with a
MAC under the audit key (`workflows.keys`, which never lives in the database)
over what was decided, so a writer who also rewrites the stored hashes, or
inserts an approval of their own, is caught as well: without the key they
cannot seal another plan.
"""

from __future__ import annotations

import hmac
from datetime import UTC

from workflows import keys
from workflows.models import Approval, Step, canonical_json, sha256_hex

# Plans have one revision until revisions exist (§22); the seal names it so
# that an approval of one revision can never pass for another.
REVISION = 1


def entry(key: str, action: str, args, compensation) -> dict:
    """One step as the plan hash covers it: the shape plans were always
    hashed in (`plans.canonical_plan`), so hashes stored before binding was
    checked stay valid. A step's `gate` joins it, only when the step has
    one, once steps have gates (§22)."""
    return {"key": key, "action": action, "args": args, "compensation": compensation or None}


def plan_hash(entries: list[dict]) -> str:
    return sha256_hex(canonical_json(entries))


def stored_hashes(lanes) -> dict[tuple, str]:
    """The plan hash of the stored steps of each `(workflow id, lane)`, in
    one query whatever their number. Lane 0 is the plan reviewers approved;
    a compensation's lane is the undo its authorizer saw."""
    lanes = set(lanes)
    if not lanes:
        return {}
    rows = (Step.objects.filter(workflow_id__in={w for w, _ in lanes}, lane__in={lane for _, lane in lanes})
            .order_by("position").values_list("workflow_id", "lane", "key", "action", "args", "compensation"))
    plans: dict[tuple, list[dict]] = {lane: [] for lane in lanes}
    for workflow_id, lane, key, action, args, compensation in rows:
        if (workflow_id, lane) in plans:
            plans[workflow_id, lane].append(entry(key, action, args, compensation))
    return {lane: plan_hash(steps) for lane, steps in plans.items()}


def approval_text(approval: Approval) -> str:
    """What an approval's MAC covers. The `seal` label keeps a MAC made for
    an approval from passing for anything else signed with the same key."""
    return canonical_json({
        "seal": "approval",
        "workflow": str(approval.workflow_id),
        "revision": REVISION,
        "plan_hash": approval.plan_hash,
        "reviewer": approval.reviewer_id,
        "decision": approval.decision,
        "at": approval.created_at.astimezone(UTC).isoformat(timespec="microseconds"),
        # Digests of the previews the reviewer was shown, once plans have them.
        "previews": [],
    })


def seal(approval: Approval, key: keys.AuditKey | None = None) -> Approval:
    """Set the approval's MAC under the current audit key (or `key`)."""
    key = key or keys.current()
    approval.key_id, approval.mac = key.kid, key.mac(approval_text(approval))
    return approval


def verifies(approval: Approval) -> bool:
    """The approval was sealed by a key still in AUDIT_KEYS and nothing it
    covers has changed since."""
    key = keys.by_id(approval.key_id) if approval.key_id else None
    return key is not None and hmac.compare_digest(key.mac(approval_text(approval)), approval.mac)
