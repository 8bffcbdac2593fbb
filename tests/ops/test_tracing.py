"""Tracing and structured logs (docs/explanation/operations-at-scale.md#operations-at-scale): one approval's trace runs
from the reviewer's request into the worker and out to the remote call; spans
and JSON log lines carry the step's fields and never a query string, a
header value, an SQL parameter or an argument; with tracing off nothing of
it is installed."""

import io
import json
import logging
import os
import subprocess
import sys
import time

import pytest
import requests
from opentelemetry import trace
from opentelemetry.trace import SpanKind

from tests.support import deciding as decide
from tests.support.api import ApiClient
from tests.support.crashing import CRASH_ENV, alive, crash_at
from tests.support.otlp_collector import Collector
from tests.support.plans import ticket_plan
from tests.support.running import run_until, wait_for_status
from tests.support.seeing import Client
from workflows import telemetry
from workflows.audit import redaction, secrets
from workflows.engine.failpoints import AFTER_PERFORM, AFTER_RECORD
from workflows.models import Attempt, AuditEvent, Step
from workflows.operations import plans
from workflows.ops import draining, processes
from workflows.states import AttemptStatus

OWN_SPANS = {
    "durable.claim",
    "durable.policy_recheck",
    "durable.request",
    "durable.perform",
    "durable.record",
    "durable.verify",
}
FIELDS = {"durable.workflow_id", "durable.step_key", "durable.operation_key", "durable.attempt"}


@pytest.fixture
def collector():
    with Collector() as running:
        yield running


def traced_worker(start_worker, collector, **env):
    # A tick far apart: the worker loop's own sweep would otherwise race
    # the approval's wake-up for the claim (a sweep's drain carries no trace).
    return start_worker(
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url, OTEL_BSP_SCHEDULE_DELAY="100", WORKER_TICK_SECONDS="30", **env
    )


def test_one_approvals_trace_runs_from_the_request_to_the_remote_call(spans, collector, people, start_worker, desk):
    traced_worker(start_worker, collector)
    workflow = plans.submit(people["agent"], ticket_plan()).workflow
    answer = ApiClient(people["reviewer"]).post(f"/workflows/{workflow.pk}/approve", {"comment": "go"})
    assert answer.status_code == 200, answer.content[:300]

    request = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
    assert len(request) == 1 and "approve" in request[0].name
    trace_id = format(request[0].context.trace_id, "032x")

    wait_for_status(workflow.pk, "COMPLETE")
    keys = {step.key: step.operation_key for step in Step.objects.filter(workflow=workflow)}
    worker_spans = collector.wait_for(
        lambda found: (
            {(s["name"], s["attributes"].get("durable.step_key")) for s in found}
            >= {("durable.verify", key) for key in keys}
        )
    )
    ours = [s for s in worker_spans if s["name"].startswith("durable.")]
    # Every span of ours for this workflow's steps is in the approval's trace,
    # with the step's fields, and every phase of every step is there.
    assert {s["trace_id"] for s in ours if s["attributes"]["durable.workflow_id"] == str(workflow.pk)} == {trace_id}
    for key, operation_key in keys.items():
        of_step = [s for s in ours if s["attributes"]["durable.step_key"] == key]
        assert {s["name"] for s in of_step} >= OWN_SPANS, key
        assert all(set(s["attributes"]) >= FIELDS for s in of_step)
        assert {s["attributes"]["durable.operation_key"] for s in of_step} == {operation_key}
        assert {s["attributes"]["durable.attempt"] for s in of_step} == {1}
    claims = [s for s in ours if s["name"] == "durable.claim"]
    assert {s["parent_span_id"] for s in claims} == {format(request[0].context.span_id, "016x")}

    # Out to the remote call: each POST the desk recorded names the requests
    # instrumentation's span, a child of that step's perform span.
    by_id = {s["span_id"]: s for s in worker_spans}
    ledger = desk.ledger()
    assert len(ledger) == 3
    for entry in ledger:
        version, trace_part, span_part, flags = entry["traceparent"].split("-")
        assert trace_part == trace_id
        call = by_id[span_part]
        assert call["scope"].endswith("requests") and call["kind"] == "SPAN_KIND_CLIENT"
        perform = by_id[call["parent_span_id"]]
        assert perform["name"] == "durable.perform"
        assert perform["attributes"]["durable.operation_key"] == entry["idempotency_key"]
    # On PostgreSQL the worker's statements are spans too (psycopg instrumentation).
    from django.db import connection

    if connection.vendor == "postgresql":
        statements = [s for s in worker_spans if s["scope"].endswith("psycopg")]
        assert statements and all("parameters" not in key for s in statements for key in s["attributes"])


def approved_traced(people, spans, count: int) -> dict:
    """`count` plans approved through the API, each request traced here:
    each workflow's id, with the trace id of the request that approved it."""
    traces = {}
    for number in range(count):
        workflow = plans.submit(people["agent"], ticket_plan(f"traced-{number}")).workflow
        spans.clear()
        answer = ApiClient(people["reviewer"]).post(f"/workflows/{workflow.pk}/approve", {"comment": "go"})
        assert answer.status_code == 200, answer.content[:300]
        (request,) = [s for s in spans.get_finished_spans() if s.kind == SpanKind.SERVER]
        traces[str(workflow.pk)] = format(request.context.trace_id, "032x")
    return traces


def drop_wake_ups(workflow_ids) -> int:
    """The wake-ups of these workflows never arrive (a broker lost them, or
    a take collapsed them): only a drain some other task or the worker
    loop's sweep starts can claim their steps."""
    from django_q.models import OrmQ

    names = {f"run {workflow_id}" for workflow_id in workflow_ids}
    lost = [row.pk for row in OrmQ.objects.all() if row.name() in names]
    OrmQ.objects.filter(pk__in=lost).delete()
    return len(lost)


def trace_of_workflow(found: list[dict], approvals: set[str]):
    """Which approval's trace a span is in: its own trace, or the trace its
    trace's first claim links to (a step claimed again starts a trace of
    its own, linked to its workflow's)."""
    linked = {
        s["trace_id"]: s["links"][0][0]
        for s in found
        if s["name"] == "durable.claim" and not s["parent_span_id"] and s["links"]
    }
    return lambda span: span["trace_id"] if span["trace_id"] in approvals else linked.get(span["trace_id"])


def attempts_ran(workflow_ids, **where) -> set[tuple[str, int]]:
    """The attempts of these workflows' steps, by operation key and number."""
    attempts = Attempt.objects.filter(step__workflow_id__in=list(workflow_ids), **where)
    return set(attempts.values_list("operation_key", "number"))


def test_every_step_that_ran_has_its_spans_in_its_approvals_trace_whichever_drain_claimed_it(
    spans, collector, people, start_worker, desk
):
    """Two clusters whose sweeps run every tick, and plans of which half
    lost their wake-ups: their steps are claimed by drains that carry no
    trace of theirs (the sweep's, another plan's wake-up, the other
    cluster's), and one step fails once and is retried. Every attempt that
    ran has its spans, each with the step's fields, each in the trace of
    the request that approved its plan: parented there, or (the retry,
    which no request woke) in a trace of its own that its claim links there."""
    traces = approved_traced(people, spans, 6)
    dropped = list(traces)[::2]
    assert drop_wake_ups(dropped) == len(dropped)
    desk.fault(mode="error", status=503, count=1)
    for name in ("east", "west"):
        start_worker(
            name=name,
            OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
            OTEL_BSP_SCHEDULE_DELAY="100",
            WORKER_TICK_SECONDS="0.2",
            RETRY_BASE_SECONDS="0.05",
            RETRY_CAP_SECONDS="0.2",
        )
    for workflow_id in traces:
        wait_for_status(workflow_id, "COMPLETE")
    ran = attempts_ran(traces)
    assert {number for _, number in ran} == {1, 2}  # the fault happened: one step ran twice
    phases = ("durable.claim", "durable.perform", "durable.record", "durable.verify")

    def of_phase(found, name):
        return {
            (s["attributes"]["durable.operation_key"], s["attributes"]["durable.attempt"])
            for s in found
            if s["name"] == name and s["attributes"].get("durable.workflow_id") in traces
        }

    # Every attempt was claimed, performed and recorded; those that succeeded were verified.
    expected = {name: ran for name in phases} | {"durable.verify": attempts_ran(traces, status="SUCCEEDED")}
    found = collector.wait_for(lambda found: all(of_phase(found, name) >= expected[name] for name in phases))
    ours = [s for s in found if s["name"] in phases and s["attributes"]["durable.workflow_id"] in traces]
    for name in phases:
        assert of_phase(ours, name) == expected[name], name
    assert all(set(s["attributes"]) >= FIELDS for s in ours)
    in_trace_of = trace_of_workflow(found, set(traces.values()))
    assert {(s["attributes"]["durable.workflow_id"], in_trace_of(s)) for s in ours} == set(traces.items())
    # The retry's spans are in a trace of their own, its claim linking to the approval's.
    retried = [s for s in ours if s["attributes"]["durable.attempt"] == 2]
    assert retried and not {s["trace_id"] for s in retried} & set(traces.values())


def verified(found: list[dict]) -> set[tuple[str, int]]:
    """The attempts that have a `durable.verify` span, by operation key and number."""
    return {
        (s["attributes"]["durable.operation_key"], s["attributes"]["durable.attempt"])
        for s in found
        if s["name"] == "durable.verify"
    }


@pytest.mark.parametrize(
    "point, recovered_by",
    [(AFTER_RECORD, "the next cluster"), (AFTER_PERFORM, "the next cluster"), (AFTER_RECORD, "its own cluster")],
)
def test_a_step_recovered_after_its_worker_was_killed_has_its_spans(
    point, recovered_by, spans, collector, people, start_worker, desk, tmp_path
):
    """A worker SIGKILLed after it performed a step's effect (`after_perform`)
    or recorded its outcome (`after_record`): recovery settles the step, by a
    lookup or by verifying what was recorded, without performing it again.
    Either its own cluster's loop sweeps it up for another of its workers,
    or, that cluster killed before its loop swept, the next cluster does.
    That claim and verification are spans of the step's attempt, linked to
    the approval's trace."""
    env = {"OTEL_EXPORTER_OTLP_ENDPOINT": collector.url, "OTEL_BSP_SCHEDULE_DELAY": "100"}
    traces = {}

    def approve():
        traces.update(approved_traced(people, spans, 1))

    if recovered_by == "its own cluster":
        marker = tmp_path / "failpoints.log"
        cluster = start_worker(FAILPOINTS=point, FAILPOINT_MARKER=str(marker), **CRASH_ENV, **env)
        approve()
    else:
        cluster = crash_at(start_worker, tmp_path, point, work=approve, **env)
    ((workflow_id, approval),) = traces.items()
    wait_for_status(workflow_id, "COMPLETE")
    if recovered_by == "its own cluster":
        died, label = marker.read_text().split()[:2]
        assert label == point and not alive(int(died))
    recovered = Step.objects.get(workflow_id=workflow_id, key="open")
    # Recovered, by a worker of that cluster.
    assert AuditEvent.objects.filter(verb="step.lease_expired", object_id=str(recovered.pk)).exists()
    assert processes.owner_pid(recovered.lease_owner) in processes.descendants(cluster.process.pid)
    # Not performed again: its one attempt was reconciled, or kept as recorded.
    (attempt,) = recovered.attempts.all()
    assert attempt.status == (AttemptStatus.RECONCILED if point == AFTER_PERFORM else AttemptStatus.SUCCEEDED)
    ran = attempts_ran(traces)
    found = collector.wait_for(lambda found: verified(found) >= ran)
    assert verified(found) == ran
    in_trace_of = trace_of_workflow(found, {approval})
    ours = [s for s in found if s["name"] in ("durable.claim", "durable.verify")]
    assert {in_trace_of(s) for s in ours} == {approval}


def test_a_cluster_stopped_gracefully_sends_the_spans_it_held_as_its_processes_exit(
    spans, collector, people, start_worker, desk
):
    """The batch span processor sends every OTEL_BSP_SCHEDULE_DELAY (here
    longer than the test) or once a batch is full (here never): a cluster
    stopped by SIGTERM to its main process (as `manage.py drain` stops it)
    sends what its workers held as each exits, before the stop ends."""
    traces = approved_traced(people, spans, 1)
    cluster = start_worker(
        OTEL_EXPORTER_OTLP_ENDPOINT=collector.url,
        OTEL_BSP_SCHEDULE_DELAY="600000",
        OTEL_BSP_MAX_QUEUE_SIZE="100000",
        OTEL_BSP_MAX_EXPORT_BATCH_SIZE="100000",
    )
    for workflow_id in traces:
        wait_for_status(workflow_id, "COMPLETE")
    ran = attempts_ran(traces)
    time.sleep(0.5)  # time enough for anything sent early to arrive
    assert not collector.spans  # held back, all of them
    draining.drain(cluster.process.pid, timeout=60, report=lambda line: None)
    found = list(collector.spans)  # no waiting: they came before the cluster was gone
    assert verified(found) == ran
    ours = [s for s in found if s["name"].startswith("durable.") and s["attributes"]["durable.workflow_id"] in traces]
    assert {s["name"] for s in ours} >= OWN_SPANS
    assert {s["trace_id"] for s in ours} == set(traces.values())


def test_a_forked_worker_that_returns_sends_its_spans_as_it_exits(collector):
    """How django-q2 runs a worker, and ends one it recycles or stops: a
    multiprocessing child forked from the process that set tracing up, whose
    `run()` returns. Its span reaches the collector as it exits, not
    OTEL_BSP_SCHEDULE_DELAY later (for a process gone, never)."""
    import multiprocessing

    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace import TracerProvider
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    provider = TracerProvider()
    exporter = OTLPSpanExporter(endpoint=f"{collector.url}/v1/traces")
    provider.add_span_processor(BatchSpanProcessor(exporter, schedule_delay_millis=600_000))
    telemetry.flush_at_exit(provider)
    worker = multiprocessing.get_context("fork").Process(target=one_span, args=(provider,))
    worker.start()
    worker.join(30)
    assert worker.exitcode == 0
    assert [s["name"] for s in collector.spans] == ["a task"]
    provider.shutdown()


def one_span(provider) -> None:
    provider.get_tracer("tests").start_span("a task").end()


def test_effects_on_threads_continue_the_steps_trace(spans, people, desk, settings):
    """In-process, on the effect threads of one worker: each remote call is
    a child of its step's perform span, in the approval's trace."""
    workflow = plans.submit(people["agent"], ticket_plan("threads")).workflow
    with telemetry.tracer().start_as_current_span("approval") as approval:
        decide.approve(workflow, by=people["reviewer"])
        carried = telemetry.carrier()
    assert carried["trace"]["traceparent"].split("-")[1] == format(approval.get_span_context().trace_id, "032x")
    with telemetry.continuing(workflow.pk, carried["trace"]):
        run_until(workflow.pk, "COMPLETE")
    finished = spans.get_finished_spans()
    performs = {s.context.span_id: s for s in finished if s.name == "durable.perform"}
    calls = [s for s in finished if s.kind == SpanKind.CLIENT and s.instrumentation_scope.name.endswith("requests")]
    calls = [call for call in calls if call.parent is not None and call.parent.span_id in performs]
    assert len(performs) == 3 and len(calls) == 3
    assert {s.context.trace_id for s in [*performs.values(), *calls]} == {approval.get_span_context().trace_id}
    assert {e["traceparent"].split("-")[2] for e in desk.ledger()} == {format(c.context.span_id, "016x") for c in calls}


def test_reconciling_an_earlier_attempt_is_a_span_of_the_step(spans, people, desk):
    """A worker died after its effect landed: the next worker's lookup (on an
    effect thread) and the settling are `durable.reconcile` spans of the step,
    and the lookup's call names their trace; the outcome found is verified
    in a `durable.verify` span of the attempt it settled."""
    from datetime import timedelta

    from django.utils import timezone

    from workflows import tasks
    from workflows.engine import execution, recovery

    workflow = plans.submit(people["agent"], ticket_plan("reconcile")).workflow
    decide.approve(workflow, by=people["reviewer"])
    step = execution.claim(workflow.pk)
    execution._request_attempt(step, step.fence)
    desk.request("POST", "/tickets", json={"title": "Printer on fire"}, headers={"Idempotency-Key": step.operation_key})
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    spans.clear()
    tasks.run_workflow(str(workflow.pk))
    finished = spans.get_finished_spans()
    reconciles = [s for s in finished if s.name == "durable.reconcile"]
    assert len(reconciles) == 2  # the lookup, and recording what it found
    assert {(s.attributes["durable.step_key"], s.attributes["durable.operation_key"]) for s in reconciles} == {
        ("open", step.operation_key)
    }
    assert len({s.context.trace_id for s in reconciles}) == 1
    (verified,) = [s for s in finished if s.name == "durable.verify" and s.attributes["durable.step_key"] == "open"]
    assert verified.attributes["durable.attempt"] == 1
    assert verified.context.trace_id == reconciles[0].context.trace_id
    lookups = [
        s
        for s in finished
        if s.kind == SpanKind.CLIENT
        and s.parent is not None
        and s.parent.span_id in {r.context.span_id for r in reconciles}
    ]
    assert (
        len(lookups) == 1
        and lookups[0].attributes.get("http.method", lookups[0].attributes.get("http.request.method")) == "GET"
    )
    assert not [s for s in finished if s.name == "durable.perform" and s.attributes["durable.step_key"] == "open"]


def test_spans_carry_no_query_string_header_value_sql_parameter_or_argument(spans, people, desk, monkeypatch):
    marker = "q7Zr2m9XkL4p"
    monkeypatch.setenv("SECRET_DESK_TOKEN", "desk-7Qp2-Zx9w-Lm4k-Rt8v")
    secrets.value_of("DESK_TOKEN")
    reviewer = Client(HTTP_X_PROBE=marker)
    reviewer.force_login(people["reviewer"])
    assert reviewer.get("/workflows/", {"q": marker}).status_code == 200
    requests.get(f"{desk.url}/tickets", params={"idempotency_key": marker}, headers={"X-Probe": marker}, timeout=5)
    requests.get(f"{desk.url}/tickets/desk-7Qp2-Zx9w-Lm4k-Rt8v", timeout=5)
    workflow = plans.submit(people["agent"], ticket_plan(marker, name=f"n {marker}")).workflow
    decide.approve(workflow, by=people["reviewer"], comment=marker)
    run_until(workflow.pk, "COMPLETE")

    finished = spans.get_finished_spans()
    kinds = {s.instrumentation_scope.name.rsplit(".", 1)[-1] for s in finished}
    assert {"django", "requests", "durableconsole"} <= kinds
    text = "\n".join(s.to_json() for s in finished)
    assert marker not in text
    assert "desk-7Qp2-Zx9w-Lm4k-Rt8v" not in text and "[REDACTED secret:DESK_TOKEN]" in text
    urls = [value for s in finished for key, value in s.attributes.items() if key in ("http.url", "url.full")]
    assert urls and not any("?" in url for url in urls)
    assert not [key for s in finished for key in s.attributes if "header" in key or key == "url.query"]


@pytest.mark.django_db(transaction=True)
def test_sql_parameters_stay_out_of_database_spans(spans, people):
    from django.db import connection

    if connection.vendor != "postgresql":
        pytest.skip("the psycopg instrumentation traces PostgreSQL connections")
    connection.close()  # a new connection, made through the instrumented connect
    marker = "Zq81-parameter-value"
    plans.submit(people["agent"], ticket_plan("sql", name=marker))
    statements = [s for s in spans.get_finished_spans() if s.instrumentation_scope.name.endswith("psycopg")]
    assert any("INSERT" in s.attributes.get("db.statement", "") for s in statements)
    assert marker not in "\n".join(s.to_json() for s in statements)
    assert not [key for s in statements for key in s.attributes if "parameter" in key]


def test_json_log_lines_carry_the_trace_and_step_fields_and_are_scrubbed(spans, people):
    workflow = plans.submit(people["agent"], ticket_plan("logs")).workflow
    step = Step.objects.get(workflow=workflow, key="open")
    step.attempts_made = 0  # as a claim counts them
    out = io.StringIO()
    handler = logging.StreamHandler(out)
    handler.addFilter(redaction.RedactingFilter())
    handler.setFormatter(telemetry.JsonFormatter())
    logger = logging.getLogger("workflows.test.json")
    logger.addHandler(handler)
    try:
        with telemetry.step_span("durable.perform", step) as span:
            logger.warning("calling with Authorization: Bearer %s", "4f9a8b7c6d5e4f3a2b1c")
        logger.info("outside any step")
    finally:
        logger.removeHandler(handler)
    inside, outside = (json.loads(line) for line in out.getvalue().splitlines())
    assert inside["trace_id"] == format(span.get_span_context().trace_id, "032x")
    assert inside["span_id"] == format(span.get_span_context().span_id, "016x")
    assert (inside["workflow_id"], inside["step_key"], inside["operation_key"], inside["attempt"]) == (
        str(workflow.pk),
        "open",
        step.operation_key,
        1,
    )
    assert "4f9a8b7c6d5e4f3a2b1c" not in inside["message"] and "[REDACTED]" in inside["message"]
    assert inside["level"] == "WARNING" and inside["logger"] == "workflows.test.json"
    assert "workflow_id" not in outside and "trace_id" not in outside


def test_with_tracing_off_nothing_is_installed(people):
    """No endpoint: no tracer provider, no instrumentation, no trace in the
    wake-up, and the engine's helpers hand back one shared no-op."""
    import requests as requests_module

    assert not telemetry.setup()
    assert not telemetry.ENABLED
    assert isinstance(trace.get_tracer_provider(), trace.ProxyTracerProvider)
    assert not hasattr(requests_module.Session.send, "__wrapped__")
    assert telemetry.carrier() == {}
    step = Step(key="s", operation_key="k")
    assert telemetry.step_span("durable.perform", step) is telemetry.step_span("durable.record", step)
    fn = object()
    assert telemetry.in_thread("durable.perform", step, fn) is fn


@pytest.mark.parametrize(
    "name, value, says",
    [
        ("LOG_FORMAT", "xml", "LOG_FORMAT must be text or json"),
        ("OTEL_EXPORTER_OTLP_ENDPOINT", "collector:4318", "OTEL_EXPORTER_OTLP_ENDPOINT must be an http"),
    ],
)
def test_bad_tracing_and_log_settings_stop_start_up(name, value, says):
    env = {**os.environ, "DEBUG": "1", name: value}
    done = subprocess.run([sys.executable, "manage.py", "check"], env=env, capture_output=True, text=True, timeout=120)
    assert done.returncode != 0 and says in done.stderr
