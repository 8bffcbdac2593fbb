"""Small, strict readers for settings that come from environment variables.

A bad value stops start-up with a message naming the variable, instead of
running with a silently different configuration. Each reader also records
the setting (name, type, default, one line of help) in CATALOG, from which
`manage.py docs_reference` writes docs/reference/settings.md: the settings
reference cannot drift from what the code reads. READ_ELSEWHERE records the
variables read without these readers.
"""

import ipaddress
import json
import math
import os
import re
from dataclasses import dataclass
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}
# Written as a person writes a number in a shell: Python's int() and float()
# also take "1_000", other scripts' digits ("１２"), "nan" and "inf".
# At most 18 digits: any such integer fits PostgreSQL's bigint, and Python's
# int() refuses more than 4,300 with an error that names no variable.
_INTEGER = re.compile(r"[+-]?[0-9]{1,18}")
_NUMBER = re.compile(r"[+-]?([0-9]+\.?[0-9]*|\.[0-9]+)([eE][+-]?[0-9]+)?")


def _refused(raw: str) -> str:
    """A refused value as an error names it: quoted, cut after 40 characters."""
    return repr(raw) if len(raw) <= 40 else f"{raw[:40]!r}… ({len(raw):,} characters)"


@dataclass(frozen=True)
class Setting:
    name: str
    type: str
    default: str
    help: str


CATALOG: dict[str, Setting] = {}


def describe(name: str, type: str, default: str, help: str) -> None:
    """Record a setting; the first description of a name stands. Also for a
    variable read outside these helpers (where Django settings are not loaded)."""
    CATALOG.setdefault(name, Setting(name, type, default, help))


# Read where they are used, by code that runs without the settings (the
# agent-side MCP server, the desk, worker start-up); listed here so that the
# settings reference names every variable the project reads.
READ_ELSEWHERE = (
    Setting("SECRET_<NAME>", "secret", "(unset)", "The value of the secret NAME, read by the worker at perform time."),
    Setting(
        "Q_CLUSTER_NAME", "string", "(unset)", "Names a django-q2 cluster and its queue (`qcluster --cluster-name`)."
    ),
    Setting(
        "WORKER_HEARTBEAT_FILE",
        "path",
        "(unset)",
        "File a worker touches as its liveness signal (`drain`, supervisors).",
    ),
    Setting(
        "REQUESTS_CA_BUNDLE",
        "path",
        "(unset)",
        "CA bundle for outbound HTTPS (webhooks); CURL_CA_BUNDLE is the fallback.",
    ),
    Setting("CURL_CA_BUNDLE", "path", "(unset)", "CA bundle for outbound HTTPS when REQUESTS_CA_BUNDLE is unset."),
    Setting(
        "DURABLE_CONSOLE_URL",
        "string",
        "(unset)",
        "The console's URL, for the MCP server (`python -m durableconsole.mcp`).",
    ),
    Setting("DURABLE_CONSOLE_TOKEN", "secret", "(unset)", "The agent's API token, for the MCP server."),
    Setting("MCP_HTTP_TOKEN", "secret", "(unset)", "Bearer token the MCP server requires in `--http` mode."),
    Setting(
        "MCP_WAIT_SECONDS",
        "integer 1 to 50",
        "50",
        "Longest one MCP `wait_for_decision` call holds before answering `decision: null` (MCP clients time out).",
    ),
    Setting("TICKETDESK_VERBOSE", "boolean", "0", "The ticket desk logs every request."),
    Setting(
        "FAILPOINTS",
        "comma-separated list",
        "(unset)",
        "Fault injection for the crash tests: the named failpoints fire.",
    ),
    Setting(
        "FAILPOINT_MARKER", "path", "(unset)", "Fault injection: a file a failpoint writes when it fires, as proof."
    ),
)
for _setting in READ_ELSEWHERE:
    describe(_setting.name, _setting.type, _setting.default, _setting.help)


def _shown(value) -> str:
    if value is None or value == "" or value == []:
        return "(unset)"
    if isinstance(value, bool):
        return "1" if value else "0"
    if isinstance(value, list):
        return ",".join(value)
    return str(value)


def _bounded(type: str, minimum) -> str:
    return type if minimum is None else f"{type} ≥ {_shown(minimum)}"


def env_str(name: str, default: str | None = None, *, help: str = "", shown: str | None = None) -> str | None:
    """`shown` documents a default that depends on the installation (a path, DEBUG)."""
    describe(name, "string", shown or _shown(default), help)
    return os.environ.get(name, default)


def env_bool(name: str, default: bool, *, help: str = "", shown: str | None = None) -> bool:
    describe(name, "boolean", shown or _shown(default), help)
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {_refused(raw)}")


def env_int(name: str, default: int, *, minimum: int | None = None, help: str = "") -> int:
    describe(name, _bounded("integer", minimum), _shown(default), help)
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if not _INTEGER.fullmatch(raw.strip()):
        raise ImproperlyConfigured(f"{name} must be an integer of at most 18 digits; got {_refused(raw)}")
    value = int(raw)
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None, help: str = "") -> float:
    describe(name, _bounded("number", minimum), _shown(default), help)
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    if not _NUMBER.fullmatch(raw.strip()) or not math.isfinite(value := float(raw)):
        raise ImproperlyConfigured(f"{name} must be a number; got {_refused(raw)}")
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_list(name: str, default: list[str], *, help: str = "", shown: str | None = None) -> list[str]:
    describe(name, "comma-separated list", shown or _shown(default), help)
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_group_map(name: str, *, help: str = "") -> dict[str, list[str]]:
    """A JSON object of names to lists of identity provider group names, e.g.
    `{"reviewers": ["idp-reviewers"]}` (OIDC_ROLE_MAP, OIDC_TEAM_MAP)."""
    describe(name, "JSON object", "(unset)", help)
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return {}
    try:
        value = json.loads(raw)
    except ValueError as exc:
        raise ImproperlyConfigured(f'{name} must be a JSON object like {{"reviewers": ["group"]}}: {exc}') from None
    if not isinstance(value, dict):
        raise ImproperlyConfigured(f'{name} must be a JSON object like {{"reviewers": ["group"]}}')
    for key, groups in value.items():
        if not key.strip() or len(key) > 150:
            raise ImproperlyConfigured(f"{name}: {key!r} is not a valid name")
        if not isinstance(groups, list) or not all(isinstance(g, str) and g for g in groups):
            raise ImproperlyConfigured(f"{name}: {key!r} must map to a list of group names; got {groups!r}")
    return {key: list(groups) for key, groups in value.items()}


def env_networks(name: str, *, help: str = "") -> list[str]:
    """Comma-separated addresses or CIDR networks (TRUSTED_PROXIES), each
    checked; returned in canonical network form."""
    describe(name, "comma-separated addresses or networks", "(unset)", help)
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or CIDR network") from None
    return networks


def env_secret(name: str, *, help: str = "") -> str:
    """The value of NAME, or the content of the file NAME_FILE (stripped); not
    both. Empty when neither is set."""
    describe(name, "secret", "(unset)", help)
    describe(f"{name}_FILE", "path", "(unset)", f"A file holding {name} (instead of the variable itself).")
    value, path = os.environ.get(name, ""), os.environ.get(f"{name}_FILE", "")
    if value and path:
        raise ImproperlyConfigured(f"Set {name} or {name}_FILE, not both")
    if not path:
        return value
    try:
        value = Path(path).read_text().strip()
    except OSError as exc:
        raise ImproperlyConfigured(f"{name}_FILE cannot be read: {exc.strerror}") from None
    if not value:
        raise ImproperlyConfigured(f"{name}_FILE is empty")
    return value
