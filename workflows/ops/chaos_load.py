"""Everything else a chaos soak (`workflows.ops.chaos`) runs at once, beside
the kills (docs/development.md#chaos-soak-and-two-clusters):

- `Reviewers`: two reviewers approving the plans from their own threads,
  racing each other on the same plans (four eyes), while the driver goes
  on submitting;
- `HookReceiver`: a webhook endpoint of the plans' team, stopped and
  started again during the soak, counting every `webhook-id` it is sent;
- `Storm`: on a seeded schedule, desk faults (503s, rate limits, commits
  whose answers are dropped, and a few refusals that dead-letter a step),
  the receiver's outage, an archive run of whatever is eligible while work
  is in flight, and a bulk reconcile of the soak's dead letters.

After the soak `Storm.check` adds to the verdict: every webhook delivery
the outbox recorded for the soak's plans arrived (at least once:
docs/explanation/agents.md#webhooks), the archive verifies and holds only
settled plans, the bulk job finished. What the archive moved out of the
tables is read back from its files (`archived_rows`) so that the soak's
other checks still see every plan.
"""

from __future__ import annotations

import random
import threading
import time
from collections import Counter
from datetime import timedelta
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from pathlib import Path

import requests
from django.contrib.auth.models import Group, User
from django.db import DatabaseError, connection
from django.utils import timezone

from workflows import roles
from workflows.audit import archive, archived
from workflows.engine import policy, previews
from workflows.errors import DomainError
from workflows.models import DeadLetter, Job, Workflow
from workflows.operations import approvals, bulk, tokens
from workflows.operations.deciding import Seen
from workflows.ops.processes import free_port
from workflows.states import WorkflowStatus
from workflows.webhooks import endpoints
from workflows.webhooks.models import WebhookDelivery, WebhookEndpoint

# Desk faults injected in turn during the soak (POST /_faults specs): each
# is used up by the next write that reaches the desk.
TURNS = (
    {"mode": "error", "status": 503, "count": 2},
    {"mode": "rate_limit", "retry_after": 1, "count": 1},
    {"mode": "commit_then_drop", "count": 1},
)
# The action whose policy asks for two approvals during the soak.
FOUR_EYES = "ticket.create"
# A refusal the steps do not retry: it dead-letters one step, which the
# bulk reconcile then sorts.
REFUSAL = {"mode": "error", "status": 422, "count": 1}
# The receiver is down this long at most (its deliveries back off from
# WEBHOOK_RETRY_SECONDS, doubling: a longer outage would only test the cap).
OUTAGE_SECONDS = 20.0


class HookReceiver:
    """A webhook receiver on a fixed port of 127.0.0.1 that can be stopped
    (connections refused) and started again on the same URL."""

    def __init__(self):
        self.port = free_port()
        self.url = f"http://127.0.0.1:{self.port}/hook"
        self.received: Counter[str] = Counter()
        self.refused_while_down = 0
        self.outages = 0
        self.lock = threading.Lock()
        self.server: ThreadingHTTPServer | None = None

    def start(self) -> HookReceiver:
        receiver = self

        class Handler(BaseHTTPRequestHandler):
            def do_POST(self):
                self.rfile.read(int(self.headers.get("Content-Length", 0)))
                with receiver.lock:
                    receiver.received[self.headers.get("webhook-id", "")] += 1
                self.send_response(204)
                self.send_header("Content-Length", "0")
                self.end_headers()

            def log_message(self, *args):
                pass

        self.server = ThreadingHTTPServer(("127.0.0.1", self.port), Handler)
        self.server.daemon_threads = True
        threading.Thread(target=self.server.serve_forever, name="hook-receiver", daemon=True).start()
        return self

    @property
    def up(self) -> bool:
        return self.server is not None

    def stop(self) -> None:
        if self.server is not None:
            self.server.shutdown()
            self.server.server_close()
            self.server = None


def operator() -> User:
    """The operator who registers the endpoint and starts the bulk job."""
    user, _ = User.objects.get_or_create(username="chaos-operator", defaults={"is_superuser": True})
    user.groups.add(Group.objects.get_or_create(name=roles.OPERATORS)[0])
    return user


class Reviewers:
    """Each reviewer approves every plan handed to it, from its own thread,
    in its own order: both race for the same plans."""

    def __init__(self, reviewers: list[User], seed: int, log):
        self.reviewers = reviewers
        self.rng = random.Random(seed)
        self.log = log
        self.queues: list[list] = [[] for _ in reviewers]
        self.lock = threading.Lock()
        self.stopping = threading.Event()
        self.approvals = 0
        self.lost_races = 0  # refused: the plan had moved on, or a decision raced this one
        self.refusals: Counter = Counter()
        self.errors: list[str] = []
        self.threads = [
            threading.Thread(target=self._run, args=(number,), name=f"reviewer-{number}", daemon=True)
            for number in range(len(reviewers))
        ]

    def start(self) -> Reviewers:
        for thread in self.threads:
            thread.start()
        return self

    def add(self, workflow_id) -> None:
        with self.lock:
            for queue in self.queues:
                queue.append(workflow_id)

    @property
    def idle(self) -> bool:
        with self.lock:
            return not any(self.queues)

    def stop(self) -> None:
        self.stopping.set()
        for thread in self.threads:
            thread.join(60)

    def _run(self, number: int) -> None:
        reviewer = self.reviewers[number]
        try:
            while not self.stopping.is_set():
                with self.lock:
                    queue = self.queues[number]
                    workflow_id = queue.pop(self.rng.randrange(len(queue))) if queue else None
                if workflow_id is None:
                    time.sleep(0.02)
                    continue
                if not self._approve(reviewer, workflow_id):
                    with self.lock:
                        self.queues[number].append(workflow_id)
                    time.sleep(0.05)
        finally:
            connection.close()

    def _approve(self, reviewer: User, workflow_id) -> bool:
        """True once done with this plan (approved, or no longer awaiting approval)."""
        try:
            workflow = Workflow.objects.get(pk=workflow_id)
            if workflow.status != WorkflowStatus.PLANNED:
                return True
            approvals.approve(workflow, by=reviewer, seen=Seen.current(workflow))
        except DomainError as exc:
            # Refused: the plan moved on (done with it), or the other
            # reviewer's decision raced this one (try again, a few times).
            self.lost_races += 1
            if not Workflow.objects.filter(pk=workflow_id, status=WorkflowStatus.PLANNED).exists():
                return True
            with self.lock:
                self.refusals[workflow_id] += 1
                if self.refusals[workflow_id] < 5:
                    return False
                self.errors.append(f"{workflow_id}: {exc}")
            return True
        except DatabaseError as exc:  # e.g. SQLite's single writer busy: try again
            connection.close()
            if len(self.errors) < 20:
                self.errors.append(f"{workflow_id}: {exc}")
            return False
        with self.lock:
            self.approvals += 1
        return True


class Storm:
    """Desk faults, the receiver's outage, an archive run and a bulk
    reconcile on one seeded schedule over the soak's fault window; `tick`
    is called from the soak's loop."""

    def __init__(self, soak, *, workdir: Path, seed: int, desk_faults: bool, archive_run: bool, bulk_run: bool):
        self.soak = soak
        self.workdir = Path(workdir)
        self.rng = random.Random(seed + 1)
        self.desk_faults, self.archive_run, self.bulk_run = desk_faults, archive_run, bulk_run
        self.receiver = HookReceiver()
        self.endpoint: WebhookEndpoint | None = None
        self.faults: Counter[str] = Counter()
        self.injected: list = []
        self.archives: list[archive.Written] = []
        self.archive_errors: list[str] = []
        self.jobs: list[Job] = []
        self.bulk_pending, self.next_bulk = False, 0.0
        self.events: list[tuple[float, str]] = []
        self.threads: list[threading.Thread] = []
        window = soak.seconds
        # One outage per period of at most five minutes, from 30% of it.
        period = min(window, 300.0)
        down = min(0.25 * period, OUTAGE_SECONDS)
        self.outages = [(start + 0.3 * period, start + 0.3 * period + down) for start in _steps(0, window, period)]
        self.refusals = sorted({0.2 * window, 0.45 * window} if desk_faults else ())
        self.archive_at = [0.5 * window] if archive_run else []
        self.archive_waited = False
        self.bulk_at = [0.75 * window] if bulk_run else []
        self.next_fault = soak.kill_every

    # -- set-up -------------------------------------------------------------

    def start(self, agent) -> None:
        self.operator = operator()
        # Four eyes: each plan needs both reviewers' approvals (its first
        # step's action asks for two), put back as it was after the soak.
        self.approvals_before = policy.policy_for(FOUR_EYES).approvals_required
        if self.approvals_before != 2:
            policy.update(FOUR_EYES, by=self.operator, reason="chaos soak: four eyes", approvals_required=2)
        self.receiver.start()
        self.endpoint, _ = endpoints.create(
            by=self.operator,
            url=self.receiver.url,
            description=f"chaos soak {self.soak.tag}",
            team=tokens.submitting_team(agent).name,
        )

    def finish(self) -> None:
        for thread in self.threads:
            thread.join()
        if getattr(self, "approvals_before", 2) != 2:
            before = self.approvals_before
            policy.update(FOUR_EYES, by=self.operator, reason="chaos soak over", approvals_required=before)
        for fault in self.injected:  # those not used up
            requests.delete(f"{self.soak.desk_url}/_faults/{fault}", timeout=10)
        if self.endpoint is not None:
            WebhookEndpoint.objects.filter(pk=self.endpoint.pk).update(enabled=False)
        self.receiver.stop()

    # -- the schedule -------------------------------------------------------

    def tick(self, now: float) -> None:
        if self.desk_faults and now >= self.next_fault:
            spec = TURNS[self.faults.total() % len(TURNS)]
            self._fault(now, spec)
            self.next_fault = now + 2 * self.soak.kill_every * self.rng.uniform(0.5, 1.5)
        while self.refusals and now >= self.refusals[0]:
            self.refusals.pop(0)
            self._fault(now, REFUSAL)
        if self.outages:
            down_at, up_at = self.outages[0]
            if self.receiver.up and down_at <= now < up_at:
                self.receiver.stop()
                self.receiver.outages += 1
                self._note(now, "webhook receiver stopped")
            elif not self.receiver.up and now >= up_at:
                self.receiver.start()
                self.outages.pop(0)
                self._note(now, "webhook receiver started again")
        if self.archive_at and now >= self.archive_at[0]:
            self.archive_at.pop(0)
            self._archive_if_eligible(now)
        if self.bulk_at and now >= self.bulk_at[0]:
            self.bulk_at.pop(0)
            self._bulk(now)

    def wrap_up(self, now: float) -> None:
        """At the end of the fault window: the receiver up again, an archive
        run if none has found a plan to take yet, and a bulk reconcile if
        none found anything to do."""
        if not self.receiver.up:
            self.receiver.start()
            self._note(now, "webhook receiver started again")
        self.outages = []
        if self.archive_at:
            self.archive_at = []
            self._in_thread("archive", self._archive)
        if self.bulk_run and not self.jobs:
            self._bulk(now)
        if self.bulk_run and not self.jobs:
            # Both refusals hit effects that a kill then left in doubt (a
            # lookup found no ticket, so they ran again): the kills are over,
            # so one more plan's effect meets a refusal and dead-letters.
            self._fault(now, REFUSAL)
            self.soak.submit_one_more()
            self.bulk_pending, self.next_bulk = True, now
            self._note(now, "bulk reconcile: a refusal for one more plan, for a dead letter to sort")

    def settling(self, now: float) -> None:
        """While the soak settles: the bulk reconcile held over from the
        window, once its dead letter is there."""
        if self.bulk_pending and now >= self.next_bulk:
            self._bulk(now, quiet=True)
            self.bulk_pending, self.next_bulk = not self.jobs, now + 1.0

    def _fault(self, now: float, spec: dict) -> None:
        response = requests.post(f"{self.soak.desk_url}/_faults", json=spec, timeout=10)
        response.raise_for_status()
        self.injected.append(response.json()["id"])
        self.faults[f"{spec['mode']} {spec.get('status', '')}".strip()] += 1

    def _note(self, now: float, text: str) -> None:
        self.events.append((round(now, 3), text))
        self.soak.log(f"{now:7.2f}s {text}")

    def _in_thread(self, name: str, work) -> None:
        def run():
            try:
                work()
            finally:
                connection.close()

        thread = threading.Thread(target=run, name=name, daemon=True)
        self.threads.append(thread)
        thread.start()

    def _archive_if_eligible(self, now: float) -> None:
        """The archive run, once a plan is eligible: on a slow host none may
        have finished with all its webhooks delivered by mid-window (the
        receiver's outage holds them), so it looks again a second later,
        until the window ends (`wrap_up`)."""
        if archive.candidates(archive.cutoffs(timedelta(0), timezone.now())).exists():
            self._in_thread("archive", self._archive)
            return
        if not self.archive_waited:
            self.archive_waited = True
            self._note(now, "archive: no plan eligible yet; looking again each second")
        self.archive_at = [now + 1.0]

    def _archive(self) -> None:
        """Whatever is eligible now: finished plans with nothing in flight."""
        directory = self.workdir / f"archive-{self.soak.tag}-{len(self.archives) + 1}"
        try:
            done = archive.write(directory, older_than=timedelta(0), batch=200, by="chaos soak")
        except Exception as exc:  # reported in the verdict
            self.archive_errors.append(f"{type(exc).__name__}: {exc}")
            return
        self.archives.append(done)
        self._note(self.soak.now(), f"archive: {done.workflows} workflows written, {done.deleted} deleted")

    def _bulk(self, now: float, quiet: bool = False) -> None:
        ids = [
            str(pk)
            for pk in DeadLetter.objects.open()
            .filter(workflow_id__in=self.soak.workflow_ids)
            .values_list("pk", flat=True)
        ]
        if not ids:
            if not quiet:
                self._note(now, "bulk reconcile: no open dead letter yet")
            return
        job, _ = bulk.reconcile(self.operator, {"ids": ids}, shown_filter={"ids": ids}, dry_run=False)
        self.jobs.append(job)
        self._note(now, f"bulk reconcile of {len(ids)} dead letters: job {job.pk}")

    # -- settling and the verdict -------------------------------------------

    def settled(self) -> bool:
        if any(thread.is_alive() for thread in self.threads) or self.bulk_pending:
            return False
        if Job.objects.filter(pk__in=[job.pk for job in self.jobs]).exclude(status=Job.Status.DONE).exists():
            return False
        return not WebhookDelivery.objects.filter(
            workflow_id__in=self.soak.workflow_ids, status=WebhookDelivery.Status.PENDING
        ).exists()

    def archived_rows(self) -> dict[str, list[dict]]:
        """The rows the archive runs moved out of the tables, by file."""
        rows: dict[str, list[dict]] = {}
        for done in self.archives:
            if done.archive is None:
                continue
            for name in ("workflows.jsonl.gz", "steps.jsonl.gz", "attempts.jsonl.gz", "webhook_deliveries.jsonl.gz"):
                rows.setdefault(name, []).extend(archive.read_rows(done.directory / name))
        return rows

    def check(self, result, rows: dict[str, list[dict]], settled_statuses) -> None:
        ours = {str(pk) for pk in self.soak.workflow_ids}
        result.desk_faults = dict(self.faults)
        result.receiver_outages = self.receiver.outages
        # Webhooks: every delivery recorded for the soak's plans, live or archived.
        live = list(
            WebhookDelivery.objects.filter(workflow_id__in=self.soak.workflow_ids, endpoint=self.endpoint).values_list(
                "id", "status", "attempts"
            )
        )
        endpoint = str(self.endpoint.pk) if self.endpoint else ""
        archived_rows = [
            (row["id"], row["status"], row["attempts"])
            for row in rows.get("webhook_deliveries.jsonl.gz", [])
            if row["endpoint_id"] == endpoint and row["workflow_id"] in ours
        ]
        deliveries = [(str(pk).replace("-", ""), status, attempts) for pk, status, attempts in live + archived_rows]
        received = self.receiver.received
        result.webhook_deliveries = len(deliveries)
        result.webhook_retried = sum(1 for _, _, attempts in deliveries if attempts > 1)
        result.webhook_repeats = sum(
            received[f"msg_{hex_}"] - 1 for hex_, _, _ in deliveries if received[f"msg_{hex_}"]
        )
        result.webhook_missing = [
            f"msg_{hex_} ({status}, {attempts} attempts)"
            for hex_, status, attempts in deliveries
            if status != WebhookDelivery.Status.DELIVERED or not received[f"msg_{hex_}"]
        ]
        # The archive: it verifies, and it took only settled plans.
        result.archive_errors = list(self.archive_errors)
        for done in self.archives:
            if done.archive is None:
                continue
            result.archived_workflows += done.deleted
            result.archive_kept += len(done.kept)
            verdict = archived.verify(done.directory)
            result.archive_errors += [f"{done.directory.name}: {problem}" for problem in verdict.problems[:20]]
        result.archive_runs = len(self.archives)
        result.archive_errors += [
            f"{row['id']} archived while {row['status']}"
            for row in rows.get("workflows.jsonl.gz", [])
            if row["status"] not in settled_statuses
        ]
        # The bulk reconcile: its jobs finished.
        for job in Job.objects.filter(pk__in=[job.pk for job in self.jobs]):
            counts = bulk.counts(job)
            result.bulk_jobs.append({"job": str(job.pk), "status": job.status, **counts})


def _steps(start: float, end: float, step: float):
    at = start
    while at < end:
        yield at
        at += step


def preview_and_queue(workflow, reviewers: Reviewers) -> None:
    """What the reviewers approve: the previews, with the requests the steps send."""
    previews.compute(workflow.pk)
    reviewers.add(workflow.pk)
