"""Settings, all read from the environment (see README: Configuration)."""

from datetime import timedelta
from pathlib import Path

import dj_database_url
from django.core.exceptions import ImproperlyConfigured

from workflows.audit.secrets import parse_policy
from workflows.env import (
    env_bool,
    env_float,
    env_group_map,
    env_int,
    env_list,
    env_networks,
    env_secret,
    env_str,
)

BASE_DIR = Path(__file__).resolve().parent.parent
VAR_DIR = Path(env_str("VAR_DIR", str(BASE_DIR / "var")))

DEBUG = env_bool("DEBUG", False)
SECRET_KEY = env_str("SECRET_KEY")
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (set DEBUG=1 for local development)")
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"

# Audit chain and approval seals (workflows.audit.keys), and the Ed25519 key set
# that signs audit checkpoints (workflows.audit.signing): both kept outside the
# database, both required without DEBUG, so that no web or worker process
# starts without them (gunicorn runs no system checks: this is the one place
# every process goes through).
AUDIT_KEYS = env_str("AUDIT_KEYS", "")
SIGNING_KEYS_FILE = env_str("SIGNING_KEYS_FILE", "")
if not DEBUG:
    for _name, _value in (("AUDIT_KEYS", AUDIT_KEYS), ("SIGNING_KEYS_FILE", SIGNING_KEYS_FILE)):
        if not _value:
            raise ImproperlyConfigured(f"{_name} must be set when DEBUG is off (see README: Configuration)")
if AUDIT_KEYS:
    from workflows.audit.keys import parse as _parse_audit_keys

    _parse_audit_keys(AUDIT_KEYS)
SIGNING_KEY_OVERLAP_HOURS = env_float("SIGNING_KEY_OVERLAP_HOURS", 24.0, minimum=0.0)
# The lifetime of an approval proof (DESIGN §25): signed as each write is
# sent, so it only has to outlive the request's way to the receiver.
APPROVAL_PROOF_TTL_SECONDS = env_int("APPROVAL_PROOF_TTL_SECONDS", 300, minimum=1)
# A message's proof (email.send) is read when the message is, maybe a day later.
APPROVAL_PROOF_MAIL_TTL_SECONDS = env_int("APPROVAL_PROOF_MAIL_TTL_SECONDS", 86_400, minimum=1)
AUDIT_CHECKPOINT_MINUTES = env_float("AUDIT_CHECKPOINT_MINUTES", 10.0, minimum=0.1)

ALLOWED_HOSTS = env_list("ALLOWED_HOSTS", ["127.0.0.1", "localhost"] if DEBUG else [])
CSRF_TRUSTED_ORIGINS = env_list("CSRF_TRUSTED_ORIGINS", [])

INSTALLED_APPS = [
    # Listed before django_q so that its `qcluster` command wraps django_q's.
    "workflows",
    "django.contrib.admin",
    "django.contrib.auth",
    "django.contrib.contenttypes",
    "django.contrib.sessions",
    "django.contrib.messages",
    "whitenoise.runserver_nostatic",
    "django.contrib.staticfiles",
    "django_htmx",
    "template_partials",
    "ninja",
    "django_q",
    "csp",
    "axes",
]

MIDDLEWARE = [
    "workflows.web.middleware.RequestSizeLimit",
    "workflows.web.middleware.RefuseUnstorableText",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    "django.contrib.sessions.middleware.SessionMiddleware",
    "django.middleware.common.CommonMiddleware",
    "django.middleware.csrf.CsrfViewMiddleware",
    "django.contrib.auth.middleware.AuthenticationMiddleware",
    # A session ends SESSION_MAX_AGE after its sign-in, whatever renewed it.
    "workflows.web.auth.SessionLimit",
    # Who is asking (client address, provider identity, token) for the audit
    # trail; then an SSO session whose ID token is due is renewed at the
    # provider, or ended (both do nothing without OIDC_ISSUER).
    "workflows.web.identity.RequestIdentity",
    "workflows.web.sso.SessionRefresh",
    "django.contrib.messages.middleware.MessageMiddleware",
    "django.middleware.clickjacking.XFrameOptionsMiddleware",
    "django_htmx.middleware.HtmxMiddleware",
    "csp.middleware.CSPMiddleware",
    # Last, as django-axes asks: it turns a lockout into a response.
    "axes.middleware.AxesMiddleware",
]

AUTHENTICATION_BACKENDS = [
    "workflows.web.auth.ThrottledLogins",
    "workflows.web.auth.LocalPasswords",
    # OpenID Connect sign-in (mozilla-django-oidc); answers only the
    # provider's callback, and only when OIDC_ISSUER is set.
    "workflows.web.sso.ProviderSignIn",
]
# Login throttling: after AXES_FAILURE_LIMIT failures for one username from
# one address, that pair is locked out for AXES_COOLOFF_MINUTES.
AXES_FAILURE_LIMIT = env_int("AXES_FAILURE_LIMIT", 5, minimum=1)
AXES_COOLOFF_TIME = timedelta(minutes=env_int("AXES_COOLOFF_MINUTES", 15, minimum=1))
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "workflows/locked_out.html"
AXES_ENABLED = env_bool("AXES_ENABLED", True)
# Locked out by the same client address the audit trail records.
AXES_CLIENT_IP_CALLABLE = "workflows.web.identity.axes_client_address"

# No inline scripts or styles anywhere; htmx is configured (meta tag) to fit.
CONTENT_SECURITY_POLICY = {
    "DIRECTIVES": {
        "default-src": ["'self'"],
        "script-src": ["'self'"],
        "style-src": ["'self'"],
        "img-src": ["'self'", "data:"],
        "connect-src": ["'self'"],
        "frame-ancestors": ["'none'"],
        "form-action": ["'self'"],
        "base-uri": ["'none'"],
        "object-src": ["'none'"],
    },
}

ROOT_URLCONF = "durableconsole.urls"
WSGI_APPLICATION = "durableconsole.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "workflows.web.views.roles_context",
                "workflows.web.sso.sign_in_context",
            ],
        },
    },
]


def _database() -> dict:
    url = env_str("DATABASE_URL") or f"sqlite:///{VAR_DIR / 'db.sqlite3'}"
    try:
        config = dj_database_url.parse(url, conn_max_age=env_int("DB_CONN_MAX_AGE", 600, minimum=0))
    except ValueError as exc:
        raise ImproperlyConfigured(f"DATABASE_URL is not a valid database URL: {exc}") from None
    engine = config["ENGINE"]
    if engine == "django.db.backends.sqlite3":
        # WAL lets readers run beside the one writer; IMMEDIATE takes the write
        # lock at BEGIN so two writers queue instead of failing mid-transaction;
        # synchronous=FULL because a checkpoint a power cut can undo is no checkpoint.
        config["OPTIONS"] = {
            "timeout": env_int("SQLITE_BUSY_TIMEOUT", 20, minimum=1),
            "transaction_mode": "IMMEDIATE",
            "init_command": "PRAGMA journal_mode=WAL; PRAGMA synchronous=FULL; PRAGMA foreign_keys=ON;",
        }
        config["TEST"] = {"NAME": str(VAR_DIR / env_str("SQLITE_TEST_NAME", "test.sqlite3"))}
        Path(config["NAME"]).parent.mkdir(parents=True, exist_ok=True)
    elif engine in ("django.db.backends.postgresql", "django.db.backends.postgresql_psycopg2"):
        config["ENGINE"] = "django.db.backends.postgresql"
        config["CONN_HEALTH_CHECKS"] = True
    else:
        raise ImproperlyConfigured(f"DATABASE_URL must be a sqlite:// or postgres:// URL; got engine {engine}")
    return config


DATABASES = {"default": _database()}
DEFAULT_AUTO_FIELD = "django.db.models.BigAutoField"

AUTH_PASSWORD_VALIDATORS = [
    {"NAME": "django.contrib.auth.password_validation.UserAttributeSimilarityValidator"},
    {"NAME": "django.contrib.auth.password_validation.MinimumLengthValidator"},
    {"NAME": "django.contrib.auth.password_validation.CommonPasswordValidator"},
    {"NAME": "django.contrib.auth.password_validation.NumericPasswordValidator"},
]
LOGIN_URL = "login"
LOGIN_REDIRECT_URL = "inbox"
LOGOUT_REDIRECT_URL = "login"

LANGUAGE_CODE = "en-us"
TIME_ZONE = "UTC"
USE_I18N = False
USE_TZ = True

STATIC_URL = "static/"
STATIC_ROOT = BASE_DIR / "staticfiles"
STATICFILES_DIRS = [BASE_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = env_bool("WHITENOISE_USE_FINDERS", DEBUG)

# Under the ASGI entry point (durableconsole.asgi, production), the threads
# that run Django in each web process: each keeps one persistent database
# connection. Waiters of the wait endpoint hold none of them while they wait.
WEB_THREADS = env_int("WEB_THREADS", 8, minimum=1)

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int("MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024)

EMAIL_BACKEND = env_str("EMAIL_BACKEND", "django.core.mail.backends.filebased.EmailBackend")
EMAIL_FILE_PATH = env_str("EMAIL_FILE_PATH", str(VAR_DIR / "mail"))
EMAIL_HOST = env_str("EMAIL_HOST", "localhost")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1)
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1)
DEFAULT_FROM_EMAIL = env_str("DEFAULT_FROM_EMAIL", "durable-console@localhost")

CONSOLE_URL = env_str("CONSOLE_URL", "http://127.0.0.1:8000").rstrip("/")
REVIEW_WEBHOOK_URL = env_str("REVIEW_WEBHOOK_URL", "")
# A reviewer's claim on a plan ("I'm on it") lapses after this many minutes
# without their activity on it (DESIGN §22).
REVIEW_CLAIM_MINUTES = env_int("REVIEW_CLAIM_MINUTES", 30, minimum=1)
# Every decision made through a session (console and review links) needs a
# sign-in younger than this many seconds, or asks to sign in again (DESIGN
# §22, §27). An hour: SSO sessions renew silently, carrying the provider's
# `auth_time`.
DECISION_MAX_AUTH_AGE = env_int("DECISION_MAX_AUTH_AGE", 3600, minimum=60)

# Sign-in (DESIGN §23). OpenID Connect when OIDC_ISSUER is set: its endpoints
# come from the issuer's discovery document, read at the first sign-in (not
# here), so a provider that is down stops sign-in, not start-up.
OIDC_ISSUER = (env_str("OIDC_ISSUER", "") or "").strip().rstrip("/")
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID", "")
OIDC_CLIENT_SECRET = env_secret("OIDC_CLIENT_SECRET")
if OIDC_ISSUER:
    if not OIDC_ISSUER.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"OIDC_ISSUER must be an https:// URL; got {OIDC_ISSUER!r}")
    if OIDC_ISSUER.startswith("http://") and not DEBUG:
        raise ImproperlyConfigured("OIDC_ISSUER must be an https:// URL when DEBUG is off")
    if not OIDC_CLIENT_ID or not OIDC_CLIENT_SECRET:
        raise ImproperlyConfigured(
            "OIDC_ISSUER needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (or OIDC_CLIENT_SECRET_FILE)"
        )
OIDC_GROUPS_CLAIM = env_str("OIDC_GROUPS_CLAIM", "groups") or "groups"
# Django group (role, `global`, or a reviewer group such as
# payments-reviewers) or team name → provider groups; at every sign-in an
# SSO user's groups and teams become exactly what these yield.
OIDC_ROLE_MAP = env_group_map("OIDC_ROLE_MAP")
OIDC_TEAM_MAP = env_group_map("OIDC_TEAM_MAP")
# A role holder whom OIDC_TEAM_MAP gives no team gets this one; unset, no
# team at all (they see no team's work, and a page says why): fail closed.
OIDC_DEFAULT_TEAM = (env_str("OIDC_DEFAULT_TEAM", "") or "").strip()
for _team in [*OIDC_TEAM_MAP, *([OIDC_DEFAULT_TEAM] if OIDC_DEFAULT_TEAM else [])]:
    if not _team.replace("-", "").replace("_", "").isalnum():
        raise ImproperlyConfigured(
            f"OIDC_TEAM_MAP / OIDC_DEFAULT_TEAM: team name {_team!r} must be a slug (letters, digits, - and _)"
        )
# At SSO sign-in, an account whose provider-verified email is in one of these
# domains is grouped, for four-eyes only, with the one active local account
# of that email (DESIGN §27; workflows.persons).
OIDC_LINK_EMAIL_DOMAINS = [
    domain.strip().lower().lstrip("@") for domain in env_list("OIDC_LINK_EMAIL_DOMAINS", []) if domain.strip()
]
# After this many seconds an SSO session's ID token is renewed at the
# provider (silently, prompt=none) at the next request; if the provider
# refuses, the session ends.
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = env_int("OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS", 15 * 60, minimum=1)
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# Local username/password sign-in (the embedded default's accounts); 0 leaves
# SSO only, and `manage.py breakglass` lets one local account in for a while.
# Off by default once there is a provider (DESIGN §27).
LOCAL_LOGIN = env_bool("LOCAL_LOGIN", not OIDC_ISSUER)
if not LOCAL_LOGIN and not OIDC_ISSUER:
    raise ImproperlyConfigured("LOCAL_LOGIN=0 needs OIDC_ISSUER: nobody could sign in")
# Addresses and networks of the reverse proxies whose X-Forwarded-For is
# believed for the client address (audit, login throttling).
TRUSTED_PROXIES = env_networks("TRUSTED_PROXIES")
# Without it, /metrics answers direct loopback callers only.
METRICS_TOKEN = env_secret("METRICS_TOKEN")

# Durable execution
TICKET_DESK_URL = env_str("TICKET_DESK_URL", "http://127.0.0.1:8100").rstrip("/")
STEP_LEASE_SECONDS = env_float("STEP_LEASE_SECONDS", 30.0, minimum=1.0)
ACTION_TIMEOUT_SECONDS = env_float("ACTION_TIMEOUT_SECONDS", 10.0, minimum=0.1)
# After a crash, a lookup's "not found" is trusted only once the lost request
# can no longer land: ACTION_TIMEOUT_SECONDS + this grace after it was sent.
RECONCILE_GRACE_SECONDS = env_float("RECONCILE_GRACE_SECONDS", 2.0, minimum=0.0)
DEFAULT_DEADLINE_SECONDS = env_int("DEFAULT_DEADLINE_SECONDS", 24 * 3600, minimum=1)
# Dead letters one batch of a bulk reconcile or replay takes (workflows.operations.bulk).
BULK_BATCH_SIZE = env_int("BULK_BATCH_SIZE", 50, minimum=1)
WORKER_TICK_SECONDS = env_float("WORKER_TICK_SECONDS", 0.5, minimum=0.05)
# Remote effects each worker process keeps in flight at once (DESIGN §19):
# threads that hold no database connection; claims, REQUESTED attempts and
# outcomes are committed in groups on the worker's own connection.
WORKER_CONCURRENCY = env_int("WORKER_CONCURRENCY", 64, minimum=1)
# Secrets by reference (workflows.audit.secrets): which actions and hosts may
# receive each named secret; values only ever in the worker's environment
# (SECRET_<NAME>) or in SECRETS_DIR/<NAME>.
SECRETS_POLICY = parse_policy(env_str("SECRETS_POLICY", ""))
SECRETS_DIR = env_str("SECRETS_DIR", "")
# Actions come from the entry points of installed packages (group
# durableconsole.actions, the built-ins included) and from these import paths
# (workflows.actions.plugins). Strict: a bad plugin stops start-up; otherwise
# it is left out and shown to operators.
# Signed outbound webhooks (workflows.webhooks): signing secrets are stored
# encrypted under these Fernet keys (comma-separated; the first encrypts, all
# decrypt). With DEBUG=1 and none set, a random key is generated into VAR_DIR.
WEBHOOK_SECRET_KEYS = env_list("WEBHOOK_SECRET_KEYS", [])
if WEBHOOK_SECRET_KEYS:
    from workflows.webhooks.cipher import parse_fernet_keys as _parse_fernet_keys

    _parse_fernet_keys(WEBHOOK_SECRET_KEYS)
# How long a rotated-out secret keeps signing beside the new one.
WEBHOOK_ROTATION_HOURS = env_float("WEBHOOK_ROTATION_HOURS", 24.0, minimum=0.0)
# Webhooks and http.post refuse loopback, private, link-local and metadata
# addresses unless this is on (a development desk on 127.0.0.1, tests).
WEBHOOK_ALLOW_PRIVATE = env_bool("WEBHOOK_ALLOW_PRIVATE", False)
# A delivery is tried this many times, waiting WEBHOOK_RETRY_SECONDS doubled
# at each failure (with jitter, at most an hour), then dead-lettered.
WEBHOOK_MAX_ATTEMPTS = env_int("WEBHOOK_MAX_ATTEMPTS", 10, minimum=1)
WEBHOOK_RETRY_SECONDS = env_float("WEBHOOK_RETRY_SECONDS", 5.0, minimum=0.01)
ACTION_MODULES = env_list("ACTION_MODULES", [])
ACTION_PLUGINS_STRICT = env_bool("ACTION_PLUGINS_STRICT", True)

Q_CLUSTER = {
    "name": "durableconsole",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 2, minimum=1),
    # A task is delivered again if not acknowledged within `retry` seconds;
    # keep it well above `timeout` so a slow but live task is not duplicated.
    "timeout": env_int("Q_TIMEOUT", 120, minimum=1),
    "retry": env_int("Q_RETRY", 180, minimum=2),
    "max_attempts": 0,
    "ack_failures": True,
    "save_limit": -1,
    "catch_up": False,
    "poll": env_float("Q_POLL", 0.1, minimum=0.01),
    "label": "Task queue",
    # Lets Q_CLUSTER_NAME name a cluster (its own queue) without more settings.
    "ALT_CLUSTERS": {},
}
# The queue only says "look now" (the state lives in the project's tables), so
# either broker is correct: the ORM broker on the same database (default: a
# wake-up commits with the approval) or Redis (REDIS_URL; wake-ups are sent
# after commit, and the worker loop's sweep covers any that are lost).
Q_BROKER = env_str("Q_BROKER", "orm")
if Q_BROKER == "redis":
    del Q_CLUSTER["orm"]
    Q_CLUSTER["redis"] = env_str("REDIS_URL", "redis://127.0.0.1:6379/0")
elif Q_BROKER != "orm":
    raise ImproperlyConfigured(f"Q_BROKER must be 'orm' or 'redis'; got {Q_BROKER!r}")
# On PostgreSQL the ORM broker is woken by NOTIFY from the approving
# transaction (workflows.queue), and waiters of the wait endpoint by
# NOTIFY from the transaction that moves their workflow
# (workflows.engine.announcements); Q_LISTEN=0 turns both off, e.g. behind a
# pooler in transaction mode, where LISTEN does not work: then the brokers
# poll, and each web process reads the statuses its waiters watch.
Q_LISTEN = env_bool("Q_LISTEN", True)
if Q_BROKER == "orm":
    # Oldest first, wake-ups of due work before any other task (workflows.queue).
    Q_CLUSTER["broker_class"] = "workflows.queue.QueueBroker"
    if Q_LISTEN and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        Q_CLUSTER["broker_class"] = "workflows.queue.ListeningBroker"
if Q_CLUSTER["retry"] <= Q_CLUSTER["timeout"]:
    raise ImproperlyConfigured("Q_RETRY must be greater than Q_TIMEOUT, or live tasks are delivered twice")

LOG_LEVEL = env_str("LOG_LEVEL", "INFO")
# "text" (one readable line each) or "json" (one JSON object per line, with
# the trace and step fields: workflows.telemetry.JsonFormatter).
LOG_FORMAT = env_str("LOG_FORMAT", "text").strip().lower()
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
        "django-q": {"level": env_str("Q_LOG_LEVEL", "WARNING"), "propagate": True},
        "axes": {"level": "WARNING", "propagate": True},
    },
}

# Tracing (workflows.telemetry): spans go by OTLP over HTTP to this
# collector (e.g. http://127.0.0.1:4318); unset or empty, tracing is off and
# nothing of it is installed.
OTEL_EXPORTER_OTLP_ENDPOINT = (env_str("OTEL_EXPORTER_OTLP_ENDPOINT", "") or "").strip()
if OTEL_EXPORTER_OTLP_ENDPOINT and not OTEL_EXPORTER_OTLP_ENDPOINT.startswith(("http://", "https://")):
    raise ImproperlyConfigured("OTEL_EXPORTER_OTLP_ENDPOINT must be an http:// or https:// URL (OTLP over HTTP)")

# The longest any session lasts from its sign-in, local or SSO, renewed or
# not (workflows.web.sessions); the cookie and the stored session expire too.
SESSION_MAX_AGE = env_int("SESSION_MAX_AGE", 8 * 3600, minimum=60)
SESSION_COOKIE_AGE = SESSION_MAX_AGE
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
if not DEBUG:
    SESSION_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    CSRF_COOKIE_SECURE = env_bool("SECURE_COOKIES", True)
    SECURE_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0)
    SECURE_HSTS_INCLUDE_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True)
    SECURE_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True)
    SECURE_SSL_REDIRECT = env_bool("SECURE_SSL_REDIRECT", True)
    # /healthz answers over plain HTTP so load balancers can probe it.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
