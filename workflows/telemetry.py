"""Tracing and structured logs (docs/explanation/operations-at-scale.md#operations-at-scale).

Tracing is on only when OTEL_EXPORTER_OTLP_ENDPOINT is set: then `setup`
installs a tracer provider exporting by OTLP over HTTP, and the maintained
Django, psycopg and requests instrumentations. Otherwise nothing is
installed (the OpenTelemetry API stays its no-op self) and the engine's
span helpers return at their first line, so the hot path pays one flag test.

The engine's own spans (`durable.claim`, `durable.policy_recheck`,
`durable.request`, `durable.perform`, `durable.record`, `durable.verify`,
`durable.complete`, `durable.reconcile`) carry the step's workflow id, key, operation key and
attempt number. An approval's wake-up carries the W3C trace context of the
request that approved (`carrier`, a task keyword): the worker that takes
the wake-up parents the spans of that workflow's steps to it (`continuing`),
and the requests instrumentation sends it on as `traceparent`. The
workflow keeps that context too (`Workflow.traceparent`, `queue.wake`), so
a step that another drain claims (another worker's, the sweep's) is parented
to it all the same. A step claimed again (a retry, a recovery), which no
request woke, starts a trace of its own at its claim, linked to its
workflow's.

A process that exits normally sends the spans it has not yet exported
before it goes (`flush_at_exit`), not up to OTEL_BSP_SCHEDULE_DELAY later,
which for a process gone is never: the process that set tracing up by an
exit hook, and every process multiprocessing forks from it (django-q2's
sentinels, workers, pushers and monitors, which leave without running exit
hooks) by a finalizer. A process killed outright loses what it had not sent.

Spans never carry query strings, header values, SQL parameters or action
arguments: the instrumentations are told not to capture them, our spans
never hold them, and every span passes `Scrubbing` on its way out, which
drops header and query attributes, cuts query strings off URLs and redacts
every text (known secrets, credential patterns).

`JsonFormatter` writes log lines as JSON with the same fields (LOG_FORMAT=json).
"""

from __future__ import annotations

import atexit
import json
import logging
import multiprocessing.util
import threading
from contextlib import contextmanager, nullcontext
from contextvars import ContextVar
from datetime import UTC, datetime

from opentelemetry import context as otel_context
from opentelemetry import propagate, trace
from opentelemetry.trace.propagation.tracecontext import TraceContextTextMapPropagator

log = logging.getLogger(__name__)

# Whether spans are made (a tracer provider is installed), and whether the
# step fields are kept for log lines (spans or JSON logs). Both False by
# default: every helper below returns before doing anything.
ENABLED = False
ACTIVE = False

_tracer: trace.Tracer = trace.NoOpTracer()
_provider = None
_OFF = nullcontext()
_TRACE_CONTEXT = TraceContextTextMapPropagator()

WORKFLOW_ID = "durable.workflow_id"
STEP_KEY = "durable.step_key"
OPERATION_KEY = "durable.operation_key"
ATTEMPT = "durable.attempt"
_LOG_NAMES = {WORKFLOW_ID: "workflow_id", STEP_KEY: "step_key", OPERATION_KEY: "operation_key", ATTEMPT: "attempt"}

# The trace contexts that this task's wake-up carried, by workflow id.
# Never mutated in place: each wake-up sets a new dict.
_carried: ContextVar[dict] = ContextVar("durable_carried", default={})  # noqa: B039
# The step attributes of the innermost step span, for log lines.
_fields: ContextVar[dict | None] = ContextVar("durable_fields", default=None)


# --- setting up -------------------------------------------------------------


def setup() -> bool:
    """Turn tracing on in this process when OTEL_EXPORTER_OTLP_ENDPOINT is
    set (web processes through the app's `ready`, workers again from
    `qcluster`; a second call does nothing). The OTLP exporter reads the
    standard OTEL_EXPORTER_OTLP_* variables itself (endpoint, headers,
    timeout) and OTEL_SERVICE_NAME names the process."""
    global ACTIVE
    from django.conf import settings

    ACTIVE = ENABLED or settings.LOG_FORMAT == "json"
    if ENABLED or not settings.OTEL_EXPORTER_OTLP_ENDPOINT:
        return ENABLED
    from opentelemetry.exporter.otlp.proto.http.trace_exporter import OTLPSpanExporter
    from opentelemetry.sdk.trace.export import BatchSpanProcessor

    install(BatchSpanProcessor(OTLPSpanExporter()), global_provider=True)
    flush_at_exit(_provider)
    return True


def install(processor, *, global_provider: bool = False) -> None:
    """Make spans, sent through `processor` behind `Scrubbing`, and
    instrument Django, psycopg and requests. Tests install an in-memory
    exporter's processor this way, and `uninstall` after."""
    global ENABLED, ACTIVE, _tracer, _provider
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor
    from opentelemetry.sdk.resources import Resource
    from opentelemetry.sdk.trace import TracerProvider

    resource = Resource.create()  # OTEL_SERVICE_NAME and OTEL_RESOURCE_ATTRIBUTES, when set
    if str(resource.attributes.get("service.name", "")).startswith("unknown_service"):
        resource = resource.merge(Resource({"service.name": "durableconsole"}))
    # Its own exit hook would wait up to 30 s for a collector that does not
    # answer: `flush_at_exit` waits less, in every process.
    provider = TracerProvider(resource=resource, shutdown_on_exit=False)
    provider.add_span_processor(Scrubbing(processor))
    if global_provider:
        trace.set_tracer_provider(provider)
    # No SQL comments (they would carry context into the statement text),
    # no SQL parameters; request and response headers are captured only
    # when OTEL_INSTRUMENTATION_HTTP_CAPTURE_HEADERS_* ask, and `Scrubbing`
    # drops them even then.
    DjangoInstrumentor().instrument(tracer_provider=provider, is_sql_commentor_enabled=False)
    PsycopgInstrumentor().instrument(tracer_provider=provider, enable_commenter=False, capture_parameters=False)
    RequestsInstrumentor().instrument(tracer_provider=provider)
    _provider = provider
    _tracer = provider.get_tracer("durableconsole")
    ENABLED = ACTIVE = True


def uninstall() -> None:
    """Undo `install` (tests): spans go out, the instrumentations come off."""
    global ENABLED, ACTIVE, _tracer, _provider
    from opentelemetry.instrumentation.django import DjangoInstrumentor
    from opentelemetry.instrumentation.psycopg import PsycopgInstrumentor
    from opentelemetry.instrumentation.requests import RequestsInstrumentor

    if _provider is not None:
        _provider.force_flush()
    for instrumentor in (DjangoInstrumentor(), PsycopgInstrumentor(), RequestsInstrumentor()):
        instrumentor.uninstrument()
    _provider, _tracer = None, trace.NoOpTracer()
    ENABLED = ACTIVE = False


def tracer() -> trace.Tracer:
    """The project's tracer (a no-op one while tracing is off)."""
    return _tracer


def flush() -> None:
    if _provider is not None:
        _provider.force_flush()


# How long a process that exits waits at most for its last spans to be sent
# (a collector that does not answer must not hold up a cluster's stop).
EXIT_FLUSH_SECONDS = 5.0


def flush_at_exit(provider) -> None:
    """Have this process, and every process that multiprocessing forks from
    it, send its unexported spans when it exits normally: a stopped
    cluster's main process, and its workers after their last task, a worker
    django-q2 recycles, its sentinel, pusher and monitor. A multiprocessing
    child leaves by `os._exit`, so this process's exit hook (`atexit`) never
    runs there, and a span still waiting for the batch processor's next send
    (every OTEL_BSP_SCHEDULE_DELAY) was lost with it. Each child registers
    a multiprocessing finalizer as it starts (the finalizers of the parent
    are dropped in the child); the finalizers run as its `run()` returns."""
    atexit.register(_flush_before_exit, provider)
    multiprocessing.util.register_after_fork(provider, _flush_when_exiting)


def _flush_when_exiting(provider) -> None:
    multiprocessing.util.Finalize(None, _flush_before_exit, args=(provider,), exitpriority=0)


def _flush_before_exit(provider) -> None:
    """Send what is left, waiting EXIT_FLUSH_SECONDS at most (the batch
    processor's flush takes no timeout: it runs on a thread of its own)."""
    sender = threading.Thread(target=provider.force_flush, name="span-flush", daemon=True)
    sender.start()
    sender.join(EXIT_FLUSH_SECONDS)


# --- scrubbing --------------------------------------------------------------


# Attributes that hold a URL (query strings are cut off) or that are dropped.
_URL_KEYS = {"http.url", "url.full", "http.target", "url.original"}
_DROPPED_KEYS = {"url.query", "db.statement.parameters"}
_DROPPED_PREFIXES = (
    "http.request.header.",
    "http.response.header.",
    "db.query.parameter.",
    "rpc.request.metadata.",
    "rpc.response.metadata.",
)


def _clean(key: str, value):
    from workflows.audit.redaction import redact_text

    if isinstance(value, str):
        if key in _URL_KEYS:
            value = value.split("?", 1)[0].split("#", 1)[0]
        return redact_text(value)
    if isinstance(value, (list, tuple)):
        return tuple(redact_text(item) if isinstance(item, str) else item for item in value)
    return value


def _clean_attributes(attributes) -> dict:
    return {
        key: _clean(key, value)
        for key, value in (attributes or {}).items()
        if key not in _DROPPED_KEYS and not key.startswith(_DROPPED_PREFIXES)
    }


def scrubbed(span):
    """A copy of a finished span fit to leave the process."""
    from opentelemetry.sdk.trace import Event, ReadableSpan
    from opentelemetry.trace import Status

    from workflows.audit.redaction import redact_text

    status = span.status
    if status.description:
        status = Status(status.status_code, redact_text(status.description))
    return ReadableSpan(
        name=redact_text(span.name).split("?", 1)[0],
        context=span.context,
        parent=span.parent,
        resource=span.resource,
        attributes=_clean_attributes(span.attributes),
        events=[Event(event.name, _clean_attributes(event.attributes), event.timestamp) for event in span.events],
        links=span.links,
        kind=span.kind,
        status=status,
        start_time=span.start_time,
        end_time=span.end_time,
        instrumentation_scope=span.instrumentation_scope,
    )


class Scrubbing:
    """A span processor in front of the exporting one: it hands on only
    `scrubbed` copies (a finished span's attributes cannot be changed)."""

    def __init__(self, inner):
        self.inner = inner

    def on_start(self, span, parent_context=None) -> None:
        self.inner.on_start(span, parent_context=parent_context)

    def _on_ending(self, span) -> None:
        pass

    def on_end(self, span) -> None:
        try:
            clean = scrubbed(span)
        except Exception:
            log.exception("a span could not be scrubbed; it is dropped")
            return
        self.inner.on_end(clean)

    def shutdown(self) -> None:
        self.inner.shutdown()

    def force_flush(self, timeout_millis: int = 30000) -> bool:
        return self.inner.force_flush(timeout_millis)


# --- carrying a trace through the queue ------------------------------------


def carrier() -> dict:
    """The current trace context as task keywords (`trace={"traceparent": ...}`),
    or none at all when tracing is off or there is no span."""
    if not ENABLED or not trace.get_current_span().get_span_context().is_valid:
        return {}
    headers: dict = {}
    propagate.inject(headers)
    return {"trace": headers}


@contextmanager
def continuing(workflow_id, headers: dict | None):
    """Inside a task whose wake-up carried `headers`: the spans of the
    workflow's steps that this task claims continue that trace."""
    if not ENABLED or not isinstance(headers, dict):
        yield
        return
    token = _carried.set({**_carried.get(), str(workflow_id): propagate.extract(headers)})
    try:
        yield
    finally:
        _carried.reset(token)


# --- the engine's spans -----------------------------------------------------


def _attributes(step, attempt=None) -> dict:
    """The step's fields; the attempt's number once requested, before that
    the number its attempt will have (when the claim counted them)."""
    found = {WORKFLOW_ID: str(step.workflow_id), STEP_KEY: step.key, OPERATION_KEY: step.operation_key}
    attempt = attempt if attempt is not None else getattr(step, "attempt", None)
    if attempt is not None:
        found[ATTEMPT] = attempt.number
    elif hasattr(step, "attempts_made"):
        found[ATTEMPT] = (step.attempts_made or 0) + 1
    return found


def _parent(step):
    """The context a step's spans start from, fixed at its claim."""
    return getattr(step, "_trace_parent", None)


def claimed(steps, started_ns: int, again=()) -> None:
    """After a claim: a `durable.claim` span for each claimed step, from
    `started_ns` to now, in its workflow's trace: the one its wake-up
    carried into this task (`continuing`), else the one its workflow keeps
    (`queue.wake`), so that a step claimed by a drain the wake-up did not
    start (another worker's, a sweep's) is in the approval's trace too. The
    step's later spans are children of that trace (siblings of the claim).
    A step claimed again (the ids in `again`: a retry come due, a step put
    back in line by recovery), which no request woke, starts a trace of its
    own at its claim, with a link to its workflow's; its later spans are
    children of the claim. So does a step of a workflow with no trace."""
    if not ENABLED:
        return
    carried = _carried.get()
    for step in steps:
        workflow = carried.get(str(step.workflow_id)) or kept(step.workflow.traceparent)
        if workflow is not None and step.pk not in again:
            span = _tracer.start_span(
                "durable.claim", context=workflow, attributes=_attributes(step), start_time=started_ns
            )
            step._trace_parent = workflow
        else:
            span = _tracer.start_span(
                "durable.claim",
                context=otel_context.Context(),
                links=_links(workflow),
                attributes=_attributes(step),
                start_time=started_ns,
            )
            step._trace_parent = trace.set_span_in_context(span)
        span.end()


def kept(traceparent: str):
    """The trace context a workflow keeps (`Workflow.traceparent`), or None."""
    if not traceparent:
        return None
    found = _TRACE_CONTEXT.extract({"traceparent": traceparent})
    return found if trace.get_current_span(found).get_span_context().is_valid else None


def _links(context) -> list:
    if context is None:
        return []
    return [trace.Link(trace.get_current_span(context).get_span_context())]


def step_span(name: str, step, attempt=None):
    """A span around one step's phase (a no-op when tracing and JSON logs are off)."""
    if not ACTIVE:
        return _OFF
    return _step_span(name, step, attempt)


@contextmanager
def _step_span(name: str, step, attempt=None, parent=None):
    attributes = _attributes(step, attempt)
    token = _fields.set(attributes)
    try:
        if not ENABLED:
            yield None
            return
        with _tracer.start_as_current_span(
            name, context=parent or _parent(step), attributes=attributes, record_exception=False
        ) as span:
            yield span
    finally:
        _fields.reset(token)


def steps_span(name: str, steps):
    """One span per step around a phase that several steps go through together."""
    if not ENABLED or not steps:
        return _OFF
    return _steps_span(name, list(steps))


@contextmanager
def _steps_span(name: str, steps):
    spans = [_tracer.start_span(name, context=_parent(step), attributes=_attributes(step)) for step in steps]
    try:
        yield
    finally:
        for span in spans:
            span.end()


def in_thread(name: str, step, fn):
    """`fn` to run on an effect thread inside the step's span. Threads do
    not inherit the submitting thread's context: it is taken here, in the
    submitting thread, and attached in the effect thread explicitly, so the
    remote call's `traceparent` names this step's trace."""
    if not ACTIVE:
        return fn
    parent = _parent(step) or otel_context.get_current()

    def run(*args):
        with _step_span(name, step, parent=parent):
            return fn(*args)

    return run


# --- logs -------------------------------------------------------------------


class JsonFormatter(logging.Formatter):
    """One JSON object per line: time, level, logger, message, the trace
    and span ids of the current span, and the step fields of the innermost
    step span. Runs after the handler's `RedactingFilter`, which has
    already scrubbed the message and the traceback (`exc_text`)."""

    def format(self, record: logging.LogRecord) -> str:
        entry = {
            "time": datetime.fromtimestamp(record.created, UTC).isoformat(timespec="milliseconds"),
            "level": record.levelname,
            "logger": record.name,
            "message": record.getMessage(),
        }
        context = trace.get_current_span().get_span_context()
        if context.is_valid:
            entry["trace_id"] = format(context.trace_id, "032x")
            entry["span_id"] = format(context.span_id, "016x")
        if fields := _fields.get():
            entry.update({_LOG_NAMES[key]: value for key, value in fields.items()})
        if record.exc_info and not record.exc_text:
            from workflows.audit.redaction import redact_text

            record.exc_text = redact_text(self.formatException(record.exc_info))
        if record.exc_text:
            entry["exception"] = record.exc_text
        return json.dumps(entry, default=str)
