"""Address rules for calls to URLs that a plan or an operator names
(webhooks and `http.post`), so that a plan cannot make the server probe
the internal network (DESIGN §21.3, §27).

A URL is parsed once (`parse`), strictly enough that every parser reads
it the same way: RFC 3986 characters only (no backslash, space or
non-ASCII, on which parsers disagree about where the host ends), no
userinfo and no fragment (the `@` and `#` that make `http://a\\@b/` or
`http://a#@b/` name a different host to each). Its parsed form, a
`Target`, is what everything after it uses: the scheme and host rules, the
address check, the connection, the Host header, the TLS server name and
the approval proof's URL.

The URL must be https, or http to a loopback host. The worker resolves
the host once, refuses an address that is not globally routable (loopback,
private, link-local, shared, reserved) or that embeds such an IPv4 address
(IPv4-mapped, NAT64, 6to4, Teredo) unless WEBHOOK_ALLOW_PRIVATE is on,
and always refuses the cloud metadata addresses; it then connects to the
address it checked (no second lookup that a short-lived DNS answer could
turn elsewhere), through no proxy, and follows no redirects.
"""

from __future__ import annotations

import ipaddress
import os
import re
import socket
import threading
from dataclasses import dataclass
from urllib.parse import urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter
from urllib3.util import parse_url

from workflows.audit.redaction import find_credential

# Instance metadata of the clouds (EC2 and GCE, EC2 over IPv6, Alibaba) and
# ECS task credentials: refused even with WEBHOOK_ALLOW_PRIVATE.
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200",
                                              "169.254.170.2")}
# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards
# to: NAT64 (well-known and local-use) and the deprecated IPv4-compatible form.
LAST_32_BITS_IPV4 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96"))
LOOPBACK_NAMES = {"localhost"}
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


class Unresolvable(Exception):
    """The host has no address now: nothing was sent."""


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
        raise AddressRefused("Use only the characters of RFC 3986 (no spaces, backslashes or non-ASCII; "
                             "percent-encode the rest, and write an international host name in its xn-- form), "
                             "and no #fragment.")
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


def _is_loopback_name(host: str) -> bool:
    if host in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def checked(url: str) -> Target:
    """The parsed URL if its scheme and host are allowed; else AddressRefused."""
    target = parse(url)
    if target.scheme == "http" and not _is_loopback_name(target.host):
        raise AddressRefused("Use https:// (http:// only to a loopback host such as 127.0.0.1).")
    return target


def scheme_problem(url: str) -> str | None:
    """Why this URL's form, scheme or host is not allowed, or None."""
    try:
        checked(url)
    except AddressRefused as exc:
        return str(exc)
    return None


def url_problem(url: str) -> str | None:
    """Why a receiver's URL (a plan's callback_url, an endpoint's url) is
    refused when given, or None. Its address is checked when called."""
    if problem := scheme_problem(url):
        return problem
    if find_credential(url):
        return "Put no credentials in the URL: deliveries are signed (webhook-signature)."
    return None


def embedded_ipv4(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> list[ipaddress.IPv4Address]:
    """The IPv4 addresses an IPv6 address leads to: mapped, NAT64 and
    IPv4-compatible (the last 32 bits), 6to4, and both ends of Teredo."""
    if address.version == 4:
        return []
    found = [a for a in (address.ipv4_mapped, address.sixtofour) if a is not None]
    if address.teredo:
        found.extend(address.teredo)
    if any(address in network for network in LAST_32_BITS_IPV4):
        found.append(ipaddress.IPv4Address(int(address) & 0xFFFFFFFF))
    return found


def refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    if address in METADATA or any(refused(inner) for inner in embedded_ipv4(address)):
        return True
    return not address.is_global and not settings.WEBHOOK_ALLOW_PRIVATE


def resolve(target: Target) -> str:
    """The address to connect to for `target`, checked; raises AddressRefused.
    Every address the name resolves to must pass: a name that answers with
    one public and one private address is refused rather than raced."""
    try:
        infos = socket.getaddrinfo(target.host, target.port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"cannot resolve {target.host}: {exc}") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses:
        raise Unresolvable(f"{target.host} has no address")
    if any(refused(address) for address in addresses):
        raise AddressRefused(f"{target.host} resolves to an address that is not allowed (loopback, private, "
                             "link-local, metadata, or an IPv6 address that embeds one; WEBHOOK_ALLOW_PRIVATE=1 "
                             "allows all but metadata)")
    return str(addresses[0])


class PinnedAdapter(HTTPAdapter):
    """Connects to the address the request was checked against
    (`request.pinned`: the target and its address), naming the target's
    host for SNI and the certificate check, whatever the URL re-parses to."""

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        target, address = request.pinned
        if host_params["scheme"] == "https":
            pool_kwargs["server_hostname"] = target.host
            pool_kwargs["assert_hostname"] = target.host
        host_params["host"], host_params["port"] = address, target.port
        return host_params, pool_kwargs


def new_session() -> requests.Session:
    """A session that reads the environment now, once: the CA bundle; no
    proxies or ~/.netrc of its own (callers pass proxies per request)."""
    session = requests.Session()
    session.trust_env = False
    bundle = os.environ.get("REQUESTS_CA_BUNDLE") or os.environ.get("CURL_CA_BUNDLE")
    if bundle:
        session.verify = bundle
    return session


_local = threading.local()


def _session() -> requests.Session:
    session = getattr(_local, "session", None)
    if session is None:
        session = _local.session = new_session()
        adapter = PinnedAdapter()
        session.mount("http://", adapter)
        session.mount("https://", adapter)
    return session


def send(method: str, url: str, *, headers: dict, timeout, data=None, json=None, auth=None) -> requests.Response:
    """Send one request to `url` under the address rules. Raises
    AddressRefused, Unresolvable or requests' exceptions. `auth` is
    requests' hook on the prepared request (the approval proof, signed
    over the URL as sent: the target's)."""
    target = checked(url)
    address = resolve(target)
    session = _session()
    prepared = session.prepare_request(requests.Request(method, target.url, headers=headers, data=data, json=json,
                                                        auth=auth))
    prepared.headers["Host"] = target.netloc
    prepared.pinned = (target, address)
    return session.send(prepared, allow_redirects=False, timeout=timeout, proxies={}, verify=session.verify)
