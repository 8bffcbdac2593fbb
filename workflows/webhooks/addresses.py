"""The one parse of an outbound URL (`parse`): strict enough that every
parser reads it the same way. `workflows.webhooks.outbound` checks and
connects to what it gives; the secrets policy judges the host it gives.
Nothing here imports the rest of the project, so both can use it."""

from __future__ import annotations

import ipaddress
import re
from dataclasses import dataclass
from urllib.parse import urlsplit

from urllib3.util import parse_url

MAX_URL_LENGTH = 2048
SCHEMES = {"http": 80, "https": 443}

# RFC 3986's characters less `#`: what is left parses one way only.
_URL_CHARACTERS = re.compile(r"[A-Za-z0-9\-._~:/?\[\]@!$&'()*+,;=%]+")
_BAD_ESCAPE = re.compile(r"%(?![0-9A-Fa-f]{2})")
_LABEL = re.compile(r"[a-z0-9_](?:[a-z0-9_-]{0,61}[a-z0-9_])?")
# A last label that is a number: resolvers read the host as an IPv4
# address in some form (`127.1`, `0x7f.0.0.1`, `2130706433`, `010.0.0.1`).
_NUMERIC_LABEL = re.compile(r"(0x[0-9a-f]*|[0-9]+)")


class AddressRefused(Exception):
    """The URL may not be called; the message says why (no secret in it)."""


@dataclass(frozen=True)
class Target:
    """A URL as parsed once: `host` in lower case (an IPv6 address without
    brackets), `port` always given, `path` with the query (what the request
    line carries)."""

    scheme: str
    host: str
    port: int
    path: str

    @property
    def netloc(self) -> str:
        host = f"[{self.host}]" if ":" in self.host else self.host
        return host if self.port == SCHEMES[self.scheme] else f"{host}:{self.port}"

    @property
    def url(self) -> str:
        """The URL that is sent: built from the parsed parts."""
        return f"{self.scheme}://{self.netloc}{self.path}"


def parse(url: str) -> Target:
    """The one parse of an outbound URL; AddressRefused when its form is
    not allowed or could be read another way."""
    if not isinstance(url, str) or not url:
        raise AddressRefused("Not a URL.")
    if len(url) > MAX_URL_LENGTH:
        raise AddressRefused(f"At most {MAX_URL_LENGTH} characters.")
    if not _URL_CHARACTERS.fullmatch(url) or _BAD_ESCAPE.search(url):
        raise AddressRefused(
            "Use only the characters of RFC 3986 (no spaces, backslashes or non-ASCII; "
            "percent-encode the rest, and write an international host name in its xn-- form), "
            "and no #fragment."
        )
    try:
        parts = urlsplit(url)
        port = parts.port
    except ValueError:
        raise AddressRefused("Not a URL.") from None
    if parts.scheme not in SCHEMES or not parts.netloc:
        raise AddressRefused("Use https:// (http:// only to a loopback host such as 127.0.0.1).")
    if "@" in parts.netloc:
        raise AddressRefused("Put no user or password in the URL (user@host).")
    host = _host(parts.hostname or "")
    if port == 0:
        raise AddressRefused("Port 0 is not a port.")
    path = (parts.path or "/") + (f"?{parts.query}" if parts.query else "")
    target = Target(parts.scheme, host, port or SCHEMES[parts.scheme], path)
    # What the HTTP client will make of the URL we send: the same host and port.
    try:
        sent = parse_url(target.url)
    except ValueError:
        raise AddressRefused("Not a URL.") from None
    if (sent.host or "").strip("[]").lower() != host or (sent.port or SCHEMES[parts.scheme]) != target.port:
        raise AddressRefused("Not a URL.")
    return target


def _host(host: str) -> str:
    if not host:
        raise AddressRefused("The URL names no host.")
    if ":" in host:
        try:
            ipaddress.IPv6Address(host)
        except ValueError:
            raise AddressRefused("Not an IPv6 address.") from None
        if "%" in host:
            raise AddressRefused("An IPv6 zone (%...) is not allowed.")
        return host
    labels = host.removesuffix(".").split(".")
    if _NUMERIC_LABEL.fullmatch(labels[-1]):
        try:
            ipaddress.IPv4Address(host)
        except ValueError:
            raise AddressRefused("Write an IPv4 address as four decimal numbers (such as 192.0.2.10).") from None
        return host
    if len(host) > 253 or not all(_LABEL.fullmatch(label) for label in labels):
        raise AddressRefused("Not a host name.")
    return host
