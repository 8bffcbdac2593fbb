"""Small, strict readers for settings that come from environment variables.

A bad value stops start-up with a message naming the variable, instead of
running with a silently different configuration.
"""

import ipaddress
import json
import os
from pathlib import Path

from django.core.exceptions import ImproperlyConfigured

_TRUE = {"1", "true", "yes", "on"}
_FALSE = {"0", "false", "no", "off", ""}


def env_str(name: str, default: str | None = None) -> str | None:
    return os.environ.get(name, default)


def env_bool(name: str, default: bool) -> bool:
    raw = os.environ.get(name)
    if raw is None:
        return default
    value = raw.strip().lower()
    if value in _TRUE:
        return True
    if value in _FALSE:
        return False
    raise ImproperlyConfigured(f"{name} must be one of 1/0, true/false, yes/no, on/off; got {raw!r}")


def env_int(name: str, default: int, *, minimum: int | None = None) -> int:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = int(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be an integer; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_float(name: str, default: float, *, minimum: float | None = None) -> float:
    raw = os.environ.get(name)
    if raw is None or raw.strip() == "":
        return default
    try:
        value = float(raw)
    except ValueError:
        raise ImproperlyConfigured(f"{name} must be a number; got {raw!r}") from None
    if minimum is not None and value < minimum:
        raise ImproperlyConfigured(f"{name} must be at least {minimum}; got {value}")
    return value


def env_list(name: str, default: list[str]) -> list[str]:
    raw = os.environ.get(name)
    if raw is None:
        return default
    return [item.strip() for item in raw.split(",") if item.strip()]


def env_group_map(name: str) -> dict[str, list[str]]:
    """A JSON object of names to lists of identity provider group names, e.g.
    `{"reviewers": ["idp-reviewers"]}` (OIDC_ROLE_MAP, OIDC_TEAM_MAP)."""
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


def env_networks(name: str) -> list[str]:
    """Comma-separated addresses or CIDR networks (TRUSTED_PROXIES), each
    checked; returned in canonical network form."""
    networks = []
    for item in env_list(name, []):
        try:
            networks.append(str(ipaddress.ip_network(item, strict=False)))
        except ValueError:
            raise ImproperlyConfigured(f"{name}: {item!r} is not an IP address or CIDR network") from None
    return networks


def env_secret(name: str) -> str:
    """The value of NAME, or the content of the file NAME_FILE (stripped); not
    both. Empty when neither is set."""
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
