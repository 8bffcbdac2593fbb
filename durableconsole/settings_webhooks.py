"""Outbound webhook settings (workflows.webhooks), imported by
durableconsole.settings."""

from workflows.env import env_bool, env_float, env_int, env_list

# Signed outbound webhooks (workflows.webhooks): signing secrets are stored
# encrypted under these Fernet keys (comma-separated; the first encrypts, all
# decrypt). With DEBUG=1 and none set, a random key is generated into VAR_DIR.
WEBHOOK_SECRET_KEYS = env_list(
    "WEBHOOK_SECRET_KEYS", [], help="Fernet keys that encrypt stored webhook secrets; the first encrypts, all decrypt."
)
if WEBHOOK_SECRET_KEYS:
    from workflows.webhooks.cipher import parse_fernet_keys as _parse_fernet_keys

    _parse_fernet_keys(WEBHOOK_SECRET_KEYS)
# How long a rotated-out secret keeps signing beside the new one.
WEBHOOK_ROTATION_HOURS = env_float(
    "WEBHOOK_ROTATION_HOURS",
    24.0,
    minimum=0.0,
    help="How long a rotated-out webhook secret keeps signing beside the new one.",
)
# Webhooks and http.post refuse loopback, private, link-local and metadata
# addresses unless this is on (a development desk on 127.0.0.1, tests).
WEBHOOK_ALLOW_PRIVATE = env_bool(
    "WEBHOOK_ALLOW_PRIVATE",
    False,
    help="Let webhooks and `http.post` reach loopback, private and link-local addresses (development, tests).",
)
# A delivery is tried this many times, waiting WEBHOOK_RETRY_SECONDS doubled
# at each failure (with jitter, at most an hour), then dead-lettered.
WEBHOOK_MAX_ATTEMPTS = env_int(
    "WEBHOOK_MAX_ATTEMPTS", 10, minimum=1, help="Deliveries of one webhook event before it is dead-lettered."
)
WEBHOOK_RETRY_SECONDS = env_float(
    "WEBHOOK_RETRY_SECONDS",
    5.0,
    minimum=0.01,
    help="First wait between webhook delivery attempts; doubled each time, with jitter, at most an hour.",
)
