"""Reconcile before replay, in bulk (docs/explanation/operations-at-scale.md#operations-at-scale).

After an outage an operator chooses many dead letters (a filter or an
explicit selection) and first reconciles them: every entry whose action can
look up is asked `lookup(operation_key)` and sorted into

- *applied*: the effect happened; the step completes with the outcome found
  and the entry closes as APPLIED (`deadletters.settle_applied`), audited,
  with no new effect;
- *safe*: the lookup says it did not happen, or the action is idempotent, so
  a replay with the same operation key cannot do it twice;
- *in doubt*: no lookup and not idempotent: left for a person.

A replay job then replays the safe group (`only="safe"`, sorting each entry
again just before its replay) or every chosen entry (`only="all"`), through
`deadletters.replay`: same operation key, current policy rechecked, audited
per entry. Replayed steps go back in line and through the normal claim,
which holds them to their action's `max_in_flight` and `rate_per_second`.

A job's selection is frozen into `JobItem`s when it is made; worker tasks
(`workflows.tasks.advance_job`) advance it in bounded batches, each batch in
one transaction. Lookups happen before that transaction, holding no lock. A
batch runs only while the job still carries the batch number its task was
queued with, and bumps it as it commits: a task delivered twice, a kick of a
stalled job racing its own batch, or a worker killed mid-batch (its
transaction rolls back) changes nothing twice. Lookups and replays never
happen in a web request.
"""

from __future__ import annotations

from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass

from django.conf import settings
from django.db import transaction
from django.db.models import Count
from django.utils import timezone

from workflows import actions, queue, roles
from workflows.actions import ActionError, Outcome
from workflows.audit import journal
from workflows.engine import failpoints, recovery
from workflows.engine.leases import worker_id
from workflows.errors import DomainError, NotAllowed, NotVisible, WrongState
from workflows.models import DeadLetter, Job, JobItem
from workflows.operations import deadletters
from workflows.reasons import clean_reason

# A batch takes BULK_BATCH_SIZE entries; its lookups run before its
# transaction, this many at once.
LOOKUPS_AT_ONCE = 8
# One job chooses at most this many entries (a filter, never "everything").
MAX_ITEMS = 10_000
SAMPLES = 5
APPLIED_REASON = "Reconciled: the effect was found by lookup"

State = JobItem.State
TASK = "workflows.tasks.advance_job"


@dataclass
class Sorted:
    """Where one entry belongs, and why."""

    state: str
    detail: str
    found: Outcome | None = None


def _check_operator(user) -> None:
    if not roles.is_operator(user):
        raise NotAllowed("Only operators can reconcile or replay dead letters.")


def sort_without_lookup(action, step) -> Sorted | None:
    """An entry sorted from its action's flags alone; None when a lookup must tell."""
    if action is None:
        return Sorted(State.IN_DOUBT, f"the action {step.action} is not installed")
    if action.can_lookup:
        return None
    if action.is_idempotent(step.args):
        return Sorted(State.SAFE, "the action is idempotent: the same operation key cannot apply twice")
    return Sorted(State.IN_DOUBT, "no lookup and not idempotent: a person must check the remote system")


def sort_found(action, step, found) -> Sorted:
    """An entry sorted by what its lookup answered (`recovery.look_up`)."""
    if isinstance(found, ActionError):
        if action.is_idempotent(step.args):
            return Sorted(State.SAFE, f"lookup failed ({found.failure_class}); the action is idempotent")
        return Sorted(State.IN_DOUBT, f"lookup failed: {found}"[:500])
    if found is None:
        return Sorted(State.SAFE, "not found by lookup: it did not happen")
    if not action.verify(found):
        return Sorted(State.IN_DOUBT, "found by lookup, but the outcome does not pass verification")
    return Sorted(State.APPLIED, f"found by lookup: {found.external_ref or 'applied'}"[:500], found)


# --- making a job -------------------------------------------------------------


def _chosen(user, chosen: dict) -> list[DeadLetter]:
    return list(deadletters.matching(user, **chosen).select_related("step", "workflow")[: MAX_ITEMS + 1])


def _make(
    user,
    kind: str,
    chosen: dict,
    *,
    shown_filter: dict,
    dry_run: bool,
    only: str = Job.Only.SAFE,
    reason: str = "",
    presort: bool = False,
) -> tuple[Job, int]:
    """A job over the open dead letters `chosen` picks (at most MAX_ITEMS);
    returns it and how many matched beyond the cap (0 or 1: "more")."""
    entries = _chosen(user, chosen)
    beyond = max(0, len(entries) - MAX_ITEMS)
    entries = entries[:MAX_ITEMS]
    now = timezone.now()
    team_ids = {entry.workflow.team_id for entry in entries}
    with transaction.atomic():
        job = Job.objects.create(
            kind=kind,
            dry_run=dry_run,
            only=only,
            filter=shown_filter,
            reason=reason,
            created_by=user,
            team_id=team_ids.pop() if len(team_ids) == 1 else None,
            created_at=now,
            updated_at=now,
        )
        items = []
        for entry in entries:
            found = sort_without_lookup(actions.find(entry.action), entry.step) if presort else None
            items.append(
                JobItem(
                    job=job,
                    dead_letter=entry,
                    state=found.state if found else State.PENDING,
                    detail=found.detail if found else "",
                    done_at=now if found else None,
                )
            )
        JobItem.objects.bulk_create(items, batch_size=1000)
        if not dry_run:
            journal.append(
                actor=user,
                verb=f"job.{kind}",
                obj_type="job",
                obj_id=job.pk,
                data={
                    "filter": shown_filter,
                    "only": only if kind == Job.Kind.REPLAY else None,
                    "items": len(items),
                    "reason": reason,
                },
            )
        _next_or_done(job, now)
    return job, beyond


def reconcile(user, chosen: dict, *, shown_filter: dict, dry_run: bool) -> tuple[Job, int]:
    """Sort the chosen entries into applied / safe / in doubt. Entries that
    need no lookup are sorted now; a worker looks up the others (and, unless
    `dry_run`, settles the applied ones)."""
    _check_operator(user)
    return _make(user, Job.Kind.RECONCILE, chosen, shown_filter=shown_filter, dry_run=dry_run, presort=True)


def replay(user, chosen: dict, *, shown_filter: dict, only: str, reason: str) -> tuple[Job, int]:
    """Replay the chosen entries: with `only="safe"` each is sorted again
    just before (applied ones are settled, not run; in-doubt ones are left
    for a person), with `only="all"` every one is replayed."""
    _check_operator(user)
    if only not in Job.Only.values:
        raise DomainError("only must be safe or all.", fields={"only": "Choose safe or all."})
    reason = clean_reason(reason)
    return _make(user, Job.Kind.REPLAY, chosen, shown_filter=shown_filter, dry_run=False, only=only, reason=reason)


# --- advancing a job ----------------------------------------------------------


def _next_or_done(job: Job, now) -> None:
    """Inside the caller's transaction: queue the next batch while entries
    remain, otherwise mark the job DONE."""
    if job.items.filter(state=State.PENDING).exists():
        queue.enqueue(TASK, str(job.pk), job.batch, name=f"job {job.pk}")
        return
    if Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING).update(
        status=Job.Status.DONE, finished_at=now, updated_at=now
    ):
        if not job.dry_run:
            journal.append(actor=job.created_by, verb="job.finished", obj_type="job", obj_id=job.pk, data=counts(job))


def _needs_lookup(job: Job, entry: DeadLetter) -> bool:
    if entry.status != DeadLetter.Status.OPEN:
        return False
    if job.kind == Job.Kind.REPLAY and job.only == Job.Only.ALL:
        return False
    action = actions.find(entry.action)
    return action is not None and action.can_lookup


def advance(job_id, batch: int) -> int:
    """One batch of a job: the entries it sorts, settles or replays. Returns
    how many; 0 when the job is not RUNNING or has moved past `batch`."""
    job = Job.objects.select_related("created_by").filter(pk=job_id).first()
    if job is None or job.status != Job.Status.RUNNING or job.batch != batch:
        return 0
    # Say who holds the job, so that the worker loop can tell a batch whose
    # process died (`engine.jobs.kick_stalled`) from a slow one.
    Job.objects.filter(pk=job.pk, batch=batch).update(owner=worker_id(), updated_at=timezone.now())
    pending = job.items.filter(state=State.PENDING).select_related("dead_letter__step").order_by("id")
    items = list(pending[: settings.BULK_BATCH_SIZE])
    asking = [item.dead_letter for item in items if _needs_lookup(job, item.dead_letter)]
    with ThreadPoolExecutor(max_workers=LOOKUPS_AT_ONCE) as pool:
        found = pool.map(lambda entry: recovery.look_up(actions.find(entry.action), entry.step.operation_key), asking)
        answers = dict(zip([entry.pk for entry in asking], found))
    now = timezone.now()
    with transaction.atomic():
        # The job's row lock orders batches; a stale or duplicated task finds
        # the number moved (or the job paused) and changes nothing.
        if not Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING, batch=batch).update(
            batch=batch + 1, owner="", updated_at=now
        ):
            return 0
        job.batch = batch + 1
        for item in items:
            state, detail = _settle(job, item, answers.get(item.dead_letter_id))
            JobItem.objects.filter(pk=item.pk, state=State.PENDING).update(
                state=state, detail=detail[:500], done_at=now
            )
        failpoints.hit(failpoints.IN_BULK_BATCH)
        _next_or_done(job, now)
    return len(items)


def _settle(job: Job, item: JobItem, answer) -> tuple[str, str]:
    """What becomes of one entry, inside the batch's transaction: each
    operation runs in a savepoint, so a refusal undoes only its own entry."""
    entry, by = item.dead_letter, job.created_by
    if entry.status != DeadLetter.Status.OPEN:
        return State.FAILED, f"it is no longer open ({entry.status})"
    action = actions.find(entry.action)
    if job.kind == Job.Kind.REPLAY and job.only == Job.Only.ALL:
        return _replay(entry, by, job.reason)
    sorted_ = sort_without_lookup(action, entry.step) or sort_found(action, entry.step, answer)
    if sorted_.state == State.APPLIED and not job.dry_run:
        try:
            deadletters.settle_applied(entry, sorted_.found, by=by, reason=job.reason or APPLIED_REASON)
        except DomainError as exc:
            return State.FAILED, exc.message
    if job.kind == Job.Kind.REPLAY and sorted_.state == State.SAFE:
        return _replay(entry, by, job.reason)
    return sorted_.state, sorted_.detail


def _replay(entry: DeadLetter, by, reason: str) -> tuple[str, str]:
    try:
        deadletters.replay(entry, by=by, reason=reason)
    except DomainError as exc:
        return State.FAILED, exc.message
    return State.REPLAYED, "replayed with its operation key"


# --- pause, resume, progress ---------------------------------------------------


def get_for_user(user, job_id) -> Job:
    """The job as `user` may see it (`Job.objects.visible_to`), else `NotVisible` (404)."""
    job = Job.objects.visible_to(user).select_related("created_by").filter(pk=job_id).first()
    if job is None:
        raise NotVisible("No such job.")
    return job


def pause(job: Job, *, by) -> Job:
    _check_operator(by)
    job = get_for_user(by, job.pk)
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status=Job.Status.RUNNING).update(
            status=Job.Status.PAUSED, updated_at=timezone.now()
        ):
            raise WrongState(f"The job is {job.status}, not running.")
        journal.append(actor=by, verb="job.paused", obj_type="job", obj_id=job.pk, data={})
    job.refresh_from_db()
    return job


def resume(job: Job, *, by) -> Job:
    _check_operator(by)
    job = get_for_user(by, job.pk)
    with transaction.atomic():
        if not Job.objects.filter(pk=job.pk, status=Job.Status.PAUSED).update(
            status=Job.Status.RUNNING, updated_at=timezone.now()
        ):
            raise WrongState(f"The job is {job.status}, not paused.")
        job.refresh_from_db()
        journal.append(actor=by, verb="job.resumed", obj_type="job", obj_id=job.pk, data={})
        _next_or_done(job, timezone.now())
    job.refresh_from_db()
    return job


def counts(job: Job) -> dict[str, int]:
    """The job's progress, read from its items."""
    by_state = dict(job.items.order_by().values_list("state").annotate(n=Count("pk")))
    every = {state: by_state.get(state, 0) for state in State.values}
    return {
        "total": sum(every.values()),
        "remaining": every[State.PENDING],
        "failed": every[State.FAILED],
        "done": sum(every.values()) - every[State.PENDING] - every[State.FAILED],
        "applied": every[State.APPLIED],
        "safe": every[State.SAFE],
        "in_doubt": every[State.IN_DOUBT],
        "replayed": every[State.REPLAYED],
    }


def samples(job: Job, limit: int = SAMPLES) -> dict[str, list[dict]]:
    """A few entries of each group, to show what the counts stand for."""
    shown = {}
    for state in (State.APPLIED, State.SAFE, State.IN_DOUBT, State.REPLAYED, State.FAILED):
        rows = job.items.filter(state=state).select_related("dead_letter__step").order_by("id")[:limit]
        shown[state.lower()] = [
            {
                "dead_letter_id": item.dead_letter_id,
                "workflow_id": item.dead_letter.workflow_id,
                "step_key": item.dead_letter.step_key,
                "action": item.dead_letter.action,
                "operation_key": item.dead_letter.step.operation_key,
                "detail": item.detail,
            }
            for item in rows
        ]
    return shown
