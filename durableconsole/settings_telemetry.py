"""Logging and tracing settings (workflows.telemetry formats the one and
sends the other), imported by durableconsole.settings."""

from django.core.exceptions import ImproperlyConfigured

from workflows.env import env_str

LOG_LEVEL = env_str("LOG_LEVEL", "INFO", help="Level of the root logger.")
# "text" (one readable line each) or "json" (one JSON object per line, with
# the trace and step fields: workflows.telemetry.JsonFormatter).
LOG_FORMAT = (
    env_str(
        "LOG_FORMAT", "text", help="`text` (one readable line each) or `json` (one object per line, with trace fields)."
    )
    .strip()
    .lower()
)
if LOG_FORMAT not in ("text", "json"):
    raise ImproperlyConfigured(f"LOG_FORMAT must be text or json, not {LOG_FORMAT!r}")
LOGGING = {
    "version": 1,
    "disable_existing_loggers": False,
    "filters": {"redact": {"()": "workflows.audit.redaction.RedactingFilter"}},
    "formatters": {
        "text": {"format": "%(asctime)s %(levelname)s %(name)s %(message)s"},
        "json": {"()": "workflows.telemetry.JsonFormatter"},
    },
    # The filter runs before the formatter: both formats see scrubbed records.
    "handlers": {"console": {"class": "logging.StreamHandler", "formatter": LOG_FORMAT, "filters": ["redact"]}},
    "root": {"handlers": ["console"], "level": LOG_LEVEL},
    "loggers": {
        # django-q2 logs under "django-q".
        "django-q": {
            "level": env_str("Q_LOG_LEVEL", "WARNING", help="Level of django-q2's own logger."),
            "propagate": True,
        },
        "axes": {"level": "WARNING", "propagate": True},
    },
}

# Tracing (workflows.telemetry): spans go by OTLP over HTTP to this
# collector (e.g. http://127.0.0.1:4318); unset or empty, tracing is off and
# nothing of it is installed.
OTEL_EXPORTER_OTLP_ENDPOINT = (
    env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "", help="OTLP/HTTP collector for traces; unset, tracing is off.") or ""
).strip()
if OTEL_EXPORTER_OTLP_ENDPOINT and not OTEL_EXPORTER_OTLP_ENDPOINT.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL (OTLP over HTTP)")
