"""Settings, all read from the environment (docs/reference/settings.md#settings).

Four blocks live apart, imported below: logging and tracing
(durableconsole.settings_telemetry), the database and its connections
(durableconsole.settings_database), outbound webhooks
(durableconsole.settings_webhooks) and Slack (durableconsole.settings_chat). Variables read outside the settings are
listed in workflows.env."""

from datetime import timedelta
from importlib.util import find_spec
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

from durableconsole.settings_chat import (  # noqa: F401  (settings: read through django.conf)
    SLACK_API_URL,
    SLACK_BOT_TOKEN,
    SLACK_CHANNELS,
    SLACK_PREVIEWS,
    SLACK_SIGNING_SECRET,
    SLACK_TEAM_ID,
)
from durableconsole.settings_database import (  # noqa: F401  (settings: read through django.conf)
    DATABASE_LISTEN_URL,
    DB_TRANSACTION_POOLER,
    check_cluster_budget,
    database,
)
from durableconsole.settings_telemetry import (  # noqa: F401  (settings: read through django.conf)
    LOG_FORMAT,
    LOG_LEVEL,
    LOGGING,
    OTEL_EXPORTER_OTLP_ENDPOINT,
)
from durableconsole.settings_webhooks import (  # noqa: F401  (settings: read through django.conf)
    WEBHOOK_ALLOW_PRIVATE,
    WEBHOOK_MAX_ATTEMPTS,
    WEBHOOK_RETRY_SECONDS,
    WEBHOOK_ROTATION_HOURS,
    WEBHOOK_SECRET_KEYS,
)
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
VAR_DIR = Path(
    env_str(
        "VAR_DIR",
        str(BASE_DIR / "var"),
        help="Directory for local state: the SQLite database, generated development keys, mail files.",
        shown="var/ in the project directory",
    )
)

DEBUG = env_bool(
    "DEBUG", False, help="Development mode: generated keys in VAR_DIR, relaxed cookies and hosts. Never in production."
)
SECRET_KEY = env_str(
    "SECRET_KEY", help="Django's secret key; required when DEBUG is off. Also signs queued task payloads."
)
if not SECRET_KEY:
    if not DEBUG:
        raise ImproperlyConfigured("SECRET_KEY must be set when DEBUG is off (set DEBUG=1 for local development)")
    SECRET_KEY = "insecure-development-key-do-not-use-in-production"

# Audit chain and approval seals (workflows.audit.keys), and the Ed25519 key set
# that signs audit checkpoints (workflows.audit.signing): both kept outside the
# database, both required without DEBUG, so that no web or worker process
# starts without them (gunicorn runs no system checks: this is the one place
# every process goes through).
AUDIT_KEYS = env_str(
    "AUDIT_KEYS",
    "",
    help="Audit HMAC keys as `kid1:secret1,kid2:secret2`; the first signs, all verify. Required when DEBUG is off.",
)
SIGNING_KEYS_FILE = env_str(
    "SIGNING_KEYS_FILE",
    "",
    help="JSON Ed25519 key set that signs audit checkpoints and approval proofs. Required when DEBUG is off.",
)
if not DEBUG:
    for _name, _value in (("AUDIT_KEYS", AUDIT_KEYS), ("SIGNING_KEYS_FILE", SIGNING_KEYS_FILE)):
        if not _value:
            raise ImproperlyConfigured(f"{_name} must be set when DEBUG is off (see docs/deploying.md#what-runs)")
if AUDIT_KEYS:
    from workflows.audit.keys import parse as _parse_audit_keys

    _parse_audit_keys(AUDIT_KEYS)
SIGNING_KEY_OVERLAP_HOURS = env_float(
    "SIGNING_KEY_OVERLAP_HOURS",
    24.0,
    minimum=0.0,
    help="How long a retired signing key stays published after `signing_key --retire`.",
)
# The lifetime of an approval proof (docs/explanation/approval-proofs.md#approval-proof): signed as each write is
# sent, so it only has to outlive the request's way to the receiver.
APPROVAL_PROOF_TTL_SECONDS = env_int(
    "APPROVAL_PROOF_TTL_SECONDS", 300, minimum=1, help="Lifetime of the approval proof sent with each remote write."
)
# A message's proof (email.send) is read when the message is, maybe a day later.
APPROVAL_PROOF_MAIL_TTL_SECONDS = env_int(
    "APPROVAL_PROOF_MAIL_TTL_SECONDS",
    86_400,
    minimum=1,
    help="Lifetime of the approval proof carried in an email's headers.",
)
AUDIT_CHECKPOINT_MINUTES = env_float(
    "AUDIT_CHECKPOINT_MINUTES", 10.0, minimum=0.1, help="How often the worker writes a signed audit checkpoint."
)

ALLOWED_HOSTS = env_list(
    "ALLOWED_HOSTS",
    ["127.0.0.1", "localhost"] if DEBUG else [],
    help="Host names the web process answers to.",
    shown="127.0.0.1,localhost with DEBUG, else (unset)",
)
CSRF_TRUSTED_ORIGINS = env_list(
    "CSRF_TRUSTED_ORIGINS", [], help="Origins trusted for CSRF, e.g. the public https origin behind a proxy."
)

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
    "django_q",
    "csp",
    "axes",
]

MIDDLEWARE = [
    "workflows.web.middleware.RequestSizeLimit",
    "workflows.web.middleware.RefuseUnstorableText",
    "django.middleware.security.SecurityMiddleware",
    "whitenoise.middleware.WhiteNoiseMiddleware",
    # Takes the request's database connection first: none to be had is a 503.
    "workflows.web.unavailable.RefuseWithoutConnection",
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
AXES_FAILURE_LIMIT = env_int(
    "AXES_FAILURE_LIMIT",
    5,
    minimum=1,
    help="Failed sign-ins for one username from one address before that pair is locked out.",
)
AXES_COOLOFF_TIME = timedelta(
    minutes=env_int(
        "AXES_COOLOFF_MINUTES", 15, minimum=1, help="How long a locked-out username and address pair stays locked."
    )
)
AXES_LOCKOUT_PARAMETERS = [["username", "ip_address"]]
AXES_RESET_ON_SUCCESS = True
AXES_LOCKOUT_TEMPLATE = "workflows/locked_out.html"
AXES_ENABLED = env_bool("AXES_ENABLED", True, help="Sign-in throttling on or off.")
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

# django-ninja is not an app here: listing it imports the package (its API
# class, and Django's test client through it) in every process at set-up,
# a worker's included, which never serves the API. Its API docs page takes
# its template and Swagger UI's files from these directories instead
# (`workflows.api.openapi.Swagger`); finding them imports nothing.
NINJA_DIR = Path(find_spec("ninja").origin).parent

ROOT_URLCONF = "durableconsole.urls"
WSGI_APPLICATION = "durableconsole.wsgi.application"

TEMPLATES = [
    {
        "BACKEND": "django.template.backends.django.DjangoTemplates",
        "DIRS": [BASE_DIR / "templates", NINJA_DIR / "templates"],
        "APP_DIRS": True,
        "OPTIONS": {
            "context_processors": [
                "django.template.context_processors.request",
                "django.contrib.auth.context_processors.auth",
                "django.contrib.messages.context_processors.messages",
                "workflows.web.context_processors.roles_context",
                "workflows.web.sso.sign_in_context",
            ],
        },
    },
]


DATABASES = {"default": database(VAR_DIR)}
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
STATICFILES_DIRS = [BASE_DIR / "static", NINJA_DIR / "static"]
STORAGES = {
    "default": {"BACKEND": "django.core.files.storage.FileSystemStorage"},
    "staticfiles": {
        "BACKEND": "django.contrib.staticfiles.storage.StaticFilesStorage"
        if DEBUG
        else "whitenoise.storage.CompressedManifestStaticFilesStorage"
    },
}
WHITENOISE_USE_FINDERS = env_bool(
    "WHITENOISE_USE_FINDERS",
    DEBUG,
    help="Serve static files straight from the app directories (no collectstatic).",
    shown="DEBUG",
)
# Whitenoise's own default, fixed when the settings are read: it would read
# DEBUG again as each handler loads its middleware, after a test runner has
# turned it off, and every test client would then list and stat every
# static file of every app through the finders.
WHITENOISE_AUTOREFRESH = DEBUG

# Under the ASGI entry point (durableconsole.asgi, production), the threads
# that run Django in each web process: they share the process's pool of
# DB_POOL_MAX database connections. Waiters of the wait endpoint hold neither
# while they wait.
WEB_THREADS = env_int(
    "WEB_THREADS",
    8,
    minimum=1,
    help="Threads per web process under the ASGI entry point; they share its DB_POOL_MAX database connections.",
)

DATA_UPLOAD_MAX_MEMORY_SIZE = env_int(
    "MAX_REQUEST_BYTES", 1024 * 1024, minimum=1024, help="Largest request body accepted."
)

EMAIL_BACKEND = env_str(
    "EMAIL_BACKEND",
    "django.core.mail.backends.filebased.EmailBackend",
    help="Django e-mail backend (the default writes messages to files in EMAIL_FILE_PATH).",
)
EMAIL_FILE_PATH = env_str(
    "EMAIL_FILE_PATH",
    str(VAR_DIR / "mail"),
    help="Directory of the file e-mail backend.",
    shown="var/mail in the project directory",
)
EMAIL_HOST = env_str("EMAIL_HOST", "localhost", help="SMTP host for the SMTP e-mail backend.")
EMAIL_PORT = env_int("EMAIL_PORT", 25, minimum=1, help="SMTP port.")
EMAIL_TIMEOUT = env_int("EMAIL_TIMEOUT", 10, minimum=1, help="Seconds an SMTP conversation may take.")
DEFAULT_FROM_EMAIL = env_str(
    "DEFAULT_FROM_EMAIL", "durable-console@localhost", help="Sender of notices and of `email.send` messages."
)

CONSOLE_URL = env_str(
    "CONSOLE_URL",
    "http://127.0.0.1:8000",
    help="The console's public base URL: links in notices, and the `iss` of approval proofs.",
).rstrip("/")
REVIEW_WEBHOOK_URL = env_str(
    "REVIEW_WEBHOOK_URL", "", help="A URL told of each plan that awaits review (a chat incoming webhook)."
)
# A reviewer's claim on a plan ("I'm on it") lapses after this many minutes
# without their activity on it (docs/explanation/review.md#review).
REVIEW_CLAIM_MINUTES = env_int(
    "REVIEW_CLAIM_MINUTES",
    30,
    minimum=1,
    help="A reviewer's claim on a plan lapses after this many minutes without activity.",
)
# Every decision made through a session (console and review links) needs a
# sign-in younger than this many seconds, or asks to sign in again
# (docs/explanation/review.md#review, docs/explanation/decisions.md#bound-decisions). An hour: SSO sessions renew
# silently, carrying the provider's `auth_time`.
DECISION_MAX_AUTH_AGE = env_int(
    "DECISION_MAX_AUTH_AGE",
    3600,
    minimum=60,
    help="Seconds since sign-in after which a decision asks to sign in again.",
)

# Sign-in (docs/explanation/teams.md#teams). OpenID Connect when OIDC_ISSUER is set: its endpoints
# come from the issuer's discovery document, read at the first sign-in (not
# here), so a provider that is down stops sign-in, not start-up.
OIDC_ISSUER = (
    (env_str("OIDC_ISSUER", "", help="OpenID Connect issuer URL; set, sign-in goes through the provider.") or "")
    .strip()
    .rstrip("/")
)
OIDC_CLIENT_ID = env_str("OIDC_CLIENT_ID", "", help="Client id registered at the provider.")
OIDC_CLIENT_SECRET = env_secret("OIDC_CLIENT_SECRET", help="Client secret registered at the provider.")
if OIDC_ISSUER:
    if not OIDC_ISSUER.startswith(("https://", "http://")):
        raise ImproperlyConfigured(f"OIDC_ISSUER must be an https:// URL; got {OIDC_ISSUER!r}")
    if OIDC_ISSUER.startswith("http://") and not DEBUG:
        raise ImproperlyConfigured("OIDC_ISSUER must be an https:// URL when DEBUG is off")
    if not OIDC_CLIENT_ID or not OIDC_CLIENT_SECRET:
        raise ImproperlyConfigured(
            "OIDC_ISSUER needs OIDC_CLIENT_ID and OIDC_CLIENT_SECRET (or OIDC_CLIENT_SECRET_FILE)"
        )
OIDC_GROUPS_CLAIM = (
    env_str("OIDC_GROUPS_CLAIM", "groups", help="The ID token claim that lists the user's groups.") or "groups"
)
# Django group (role, `global`, or a reviewer group such as
# payments-reviewers) or team name → provider groups; at every sign-in an
# SSO user's groups and teams become exactly what these yield.
OIDC_ROLE_MAP = env_group_map(
    "OIDC_ROLE_MAP", help="JSON: role or Django group name to provider groups, applied at every sign-in."
)
OIDC_TEAM_MAP = env_group_map("OIDC_TEAM_MAP", help="JSON: team name to provider groups, applied at every sign-in.")
# A role holder whom OIDC_TEAM_MAP gives no team gets this one; unset, no
# team at all (they see no team's work, and a page says why): fail closed.
OIDC_DEFAULT_TEAM = (
    env_str(
        "OIDC_DEFAULT_TEAM", "", help="Team of a role holder whom OIDC_TEAM_MAP gives none; unset, they get no team."
    )
    or ""
).strip()
for _team in [*OIDC_TEAM_MAP, *([OIDC_DEFAULT_TEAM] if OIDC_DEFAULT_TEAM else [])]:
    if not _team.replace("-", "").replace("_", "").isalnum():
        raise ImproperlyConfigured(
            f"OIDC_TEAM_MAP / OIDC_DEFAULT_TEAM: team name {_team!r} must be a slug (letters, digits, - and _)"
        )
# At SSO sign-in, an account whose provider-verified email is in one of these
# domains is grouped, for four-eyes only, with the one active local account
# of that email (docs/explanation/decisions.md#bound-decisions; workflows.persons).
OIDC_LINK_EMAIL_DOMAINS = [
    domain.strip().lower().lstrip("@")
    for domain in env_list(
        "OIDC_LINK_EMAIL_DOMAINS",
        [],
        help="Email domains whose verified SSO accounts are grouped with the local account of that email (four-eyes).",
    )
    if domain.strip()
]
# After this many seconds an SSO session's ID token is renewed at the
# provider (silently, prompt=none) at the next request; if the provider
# refuses, the session ends.
OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS = env_int(
    "OIDC_RENEW_ID_TOKEN_EXPIRY_SECONDS",
    15 * 60,
    minimum=1,
    help="Seconds after which an SSO session's ID token is renewed silently at the provider.",
)
OIDC_TIMEOUT = env_float("OIDC_TIMEOUT_SECONDS", 10.0, minimum=0.1, help="Seconds a request to the provider may take.")
# Local username/password sign-in (the embedded default's accounts); 0 leaves
# SSO only, and `manage.py breakglass` lets one local account in for a while.
# Off by default once there is a provider (docs/explanation/decisions.md#bound-decisions).
LOCAL_LOGIN = env_bool(
    "LOCAL_LOGIN",
    not OIDC_ISSUER,
    help="Username and password sign-in; off by default once OIDC_ISSUER is set.",
    shown="1 without OIDC_ISSUER, else 0",
)
if not LOCAL_LOGIN and not OIDC_ISSUER:
    raise ImproperlyConfigured("LOCAL_LOGIN=0 needs OIDC_ISSUER: nobody could sign in")
# Addresses and networks of the reverse proxies whose X-Forwarded-For is
# believed for the client address (audit, login throttling).
TRUSTED_PROXIES = env_networks(
    "TRUSTED_PROXIES", help="Reverse proxies whose X-Forwarded-For is believed for the client address."
)
# Without it, /metrics answers direct loopback callers only.
METRICS_TOKEN = env_secret(
    "METRICS_TOKEN", help="Bearer token required by /metrics; unset, only direct loopback callers may scrape."
)

# Durable execution
TICKET_DESK_URL = env_str(
    "TICKET_DESK_URL", "http://127.0.0.1:8100", help="Base URL of the ticket desk the ticket actions call."
).rstrip("/")
STEP_LEASE_SECONDS = env_float(
    "STEP_LEASE_SECONDS", 30.0, minimum=1.0, help="Length of a worker's lease on a step; renewed while the effect runs."
)
ACTION_TIMEOUT_SECONDS = env_float(
    "ACTION_TIMEOUT_SECONDS",
    10.0,
    minimum=0.1,
    help="Seconds one remote effect may take before its outcome counts as unknown.",
)
# After a crash, a lookup's "not found" is trusted only once the lost request
# can no longer land: ACTION_TIMEOUT_SECONDS + this grace after it was sent.
RECONCILE_GRACE_SECONDS = env_float(
    "RECONCILE_GRACE_SECONDS",
    2.0,
    minimum=0.0,
    help='Extra wait, after ACTION_TIMEOUT_SECONDS, before a lookup\'s "not found" is trusted.',
)
DEFAULT_DEADLINE_SECONDS = env_int(
    "DEFAULT_DEADLINE_SECONDS", 24 * 3600, minimum=1, help="Deadline of a plan that sets none, from submission."
)
# Dead letters one batch of a bulk reconcile or replay takes (workflows.operations.bulk).
BULK_BATCH_SIZE = env_int(
    "BULK_BATCH_SIZE", 50, minimum=1, help="Dead letters one batch of a bulk reconcile or replay job takes."
)
WORKER_TICK_SECONDS = env_float(
    "WORKER_TICK_SECONDS", 0.5, minimum=0.05, help="How often an idle worker looks for due work without a wake-up."
)
# Remote effects each worker process keeps in flight at once (docs/explanation/concurrency.md#effects-in-flight):
# threads that hold no database connection; claims, REQUESTED attempts and
# outcomes are committed in groups on the worker's own connection.
WORKER_CONCURRENCY = env_int(
    "WORKER_CONCURRENCY", 64, minimum=1, help="Remote effects each worker process keeps in flight at once."
)
# Secrets by reference (workflows.audit.secrets): which actions and hosts may
# receive each named secret; values only ever in the worker's environment
# (SECRET_<NAME>) or in SECRETS_DIR/<NAME>.
SECRETS_POLICY = parse_policy(
    env_str(
        "SECRETS_POLICY",
        "",
        help="JSON, or a path to a JSON file: each secret a plan may reference, with its allowed actions and hosts.",
    )
)
SECRETS_DIR = env_str(
    "SECRETS_DIR", "", help="Directory of secret files, one per name, read by the worker at perform time."
)
# Actions come from the entry points of installed packages (group
# durableconsole.actions, the built-ins included) and from these import paths
# (workflows.actions.plugins). Strict: a bad plugin stops start-up; otherwise
# it is left out and shown to operators.
ACTION_MODULES = env_list(
    "ACTION_MODULES", [], help="Import paths of modules whose actions are installed besides the entry points."
)
ACTION_PLUGINS_STRICT = env_bool(
    "ACTION_PLUGINS_STRICT",
    True,
    help="Stop start-up on any action plugin problem; off, bad plugins are left out and shown to operators.",
)

Q_CLUSTER = {
    "name": "durableconsole",
    "orm": "default",
    "workers": env_int("Q_WORKERS", 2, minimum=1, help="django-q2 worker processes per cluster."),
    # A task is delivered again if not acknowledged within `retry` seconds;
    # keep it well above `timeout` so a slow but live task is not duplicated.
    "timeout": env_int("Q_TIMEOUT", 120, minimum=1, help="Seconds after which django-q2 kills a task."),
    "retry": env_int(
        "Q_RETRY",
        180,
        minimum=2,
        help="Seconds after which an unacknowledged task is delivered again; must exceed Q_TIMEOUT.",
    ),
    "max_attempts": 0,
    "ack_failures": True,
    "save_limit": -1,
    "catch_up": False,
    "poll": env_float("Q_POLL", 0.1, minimum=0.01, help="Seconds between the ORM broker's polls."),
    "label": "Task queue",
    # Lets Q_CLUSTER_NAME name a cluster (its own queue) without more settings.
    "ALT_CLUSTERS": {},
}
# The queue only says "look now" (the state lives in the project's tables), so
# either broker is correct: the ORM broker on the same database (default: a
# wake-up commits with the approval) or Redis (REDIS_URL; wake-ups are sent
# after commit, and the worker loop's sweep covers any that are lost).
Q_BROKER = env_str("Q_BROKER", "orm", help="Queue broker: `orm` (the same database) or `redis`.")
_REDIS_URL = env_str("REDIS_URL", "redis://127.0.0.1:6379/0", help="Redis URL when Q_BROKER is `redis`.")
if Q_BROKER == "redis":
    del Q_CLUSTER["orm"]
    Q_CLUSTER["redis"] = _REDIS_URL
elif Q_BROKER != "orm":
    raise ImproperlyConfigured(f"Q_BROKER must be 'orm' or 'redis'; got {Q_BROKER!r}")
# On PostgreSQL the ORM broker is woken by NOTIFY from the approving
# transaction (workflows.queue), and waiters of the wait endpoint by
# NOTIFY from the transaction that moves their workflow
# (workflows.engine.announcements); Q_LISTEN=0 turns both off, e.g. behind a
# pooler in transaction mode, where LISTEN does not work: then the brokers
# poll, and each web process reads the statuses its waiters watch.
Q_LISTEN = env_bool(
    "Q_LISTEN",
    True,
    help="On PostgreSQL, wake workers and waiters by LISTEN/NOTIFY; 0 behind a transaction-mode pooler.",
)
if (
    Q_LISTEN
    and DB_TRANSACTION_POOLER
    and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql"
    and not DATABASE_LISTEN_URL
):
    raise ImproperlyConfigured(
        "Behind a transaction-mode pooler (DB_TRANSACTION_POOLER=1) LISTEN does not work through DATABASE_URL: "
        "set DATABASE_LISTEN_URL to a direct connection to the same PostgreSQL, or Q_LISTEN=0 to poll."
    )
if Q_BROKER == "orm":
    # Oldest first, wake-ups of due work before any other task (workflows.queue).
    Q_CLUSTER["broker_class"] = "workflows.queue.QueueBroker"
    if Q_LISTEN and DATABASES["default"]["ENGINE"] == "django.db.backends.postgresql":
        Q_CLUSTER["broker_class"] = "workflows.queue.ListeningBroker"
# Notices, previews, webhook and chat deliveries have a lane of their own
# (workflows.queue.LANES), served in each cluster by these workers.
Q_MESSAGE_WORKERS = env_int(
    "Q_MESSAGE_WORKERS", 1, minimum=1, help="Worker processes per cluster for notices, previews and deliveries."
)
# How many connections a cluster may hold, checked against its worker counts.
WORKER_DB_CONNECTIONS = check_cluster_budget(Q_CLUSTER["workers"], Q_MESSAGE_WORKERS)
if Q_CLUSTER["retry"] <= Q_CLUSTER["timeout"]:
    raise ImproperlyConfigured("Q_RETRY must be greater than Q_TIMEOUT, or live tasks are delivered twice")

# The longest any session lasts from its sign-in, local or SSO, renewed or
# not (workflows.web.sessions); the cookie and the stored session expire too.
SESSION_MAX_AGE = env_int(
    "SESSION_MAX_AGE", 8 * 3600, minimum=60, help="Longest any session lasts from its sign-in, local or SSO."
)
SESSION_COOKIE_AGE = SESSION_MAX_AGE
SESSION_EXPIRE_AT_BROWSER_CLOSE = True
SESSION_COOKIE_HTTPONLY = True
CSRF_COOKIE_HTTPONLY = False  # htmx reads the token from the page, not the cookie
SECURE_CONTENT_TYPE_NOSNIFF = True
SECURE_REFERRER_POLICY = "same-origin"
X_FRAME_OPTIONS = "DENY"
# Read with or without DEBUG, so that the settings reference lists them and a
# bad value fails in development too; they apply only when DEBUG is off.
_SECURE_COOKIES = env_bool("SECURE_COOKIES", True, help="Secure flag on session and CSRF cookies (when DEBUG is off).")
_HSTS_SECONDS = env_int("SECURE_HSTS_SECONDS", 365 * 24 * 3600, minimum=0, help="HSTS max-age (when DEBUG is off).")
_HSTS_SUBDOMAINS = env_bool("SECURE_HSTS_INCLUDE_SUBDOMAINS", True, help="HSTS includeSubDomains (when DEBUG is off).")
_HSTS_PRELOAD = env_bool("SECURE_HSTS_PRELOAD", True, help="HSTS preload (when DEBUG is off).")
_SSL_REDIRECT = env_bool(
    "SECURE_SSL_REDIRECT", True, help="Redirect plain HTTP to HTTPS, except /healthz and /metrics (when DEBUG is off)."
)
if not DEBUG:
    SESSION_COOKIE_SECURE = CSRF_COOKIE_SECURE = _SECURE_COOKIES
    SECURE_HSTS_SECONDS = _HSTS_SECONDS
    SECURE_HSTS_INCLUDE_SUBDOMAINS = _HSTS_SUBDOMAINS
    SECURE_HSTS_PRELOAD = _HSTS_PRELOAD
    SECURE_SSL_REDIRECT = _SSL_REDIRECT
    # /healthz answers over plain HTTP so load balancers can probe it.
    SECURE_REDIRECT_EXEMPT = [r"^healthz$", r"^metrics$"]
    SECURE_PROXY_SSL_HEADER = ("HTTP_X_FORWARDED_PROTO", "https")
