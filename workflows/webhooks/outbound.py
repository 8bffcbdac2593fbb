"""Address rules for calls to URLs that a plan or an operator names
(webhooks and `http.post`), so that a plan cannot make the server probe
the internal network (docs/explanation/agents.md#webhooks, docs/explanation/decisions.md#bound-decisions).

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
import socket
import threading

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter

from workflows.audit.redaction import find_credential

# The one parse, and what it refuses with, are used through this module too.
from workflows.webhooks.addresses import AddressRefused, Target, parse  # noqa: F401

# Instance metadata of the clouds (EC2 and GCE, EC2 over IPv6, Alibaba) and
# ECS task credentials: refused even with WEBHOOK_ALLOW_PRIVATE.
METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200", "169.254.170.2")}
# IPv6 prefixes whose last 32 bits are an IPv4 address a gateway forwards
# to: NAT64 (well-known and local-use) and the deprecated IPv4-compatible form.
LAST_32_BITS_IPV4 = tuple(ipaddress.ip_network(n) for n in ("64:ff9b::/96", "64:ff9b:1::/48", "::/96"))
LOOPBACK_NAMES = {"localhost"}


class Unresolvable(Exception):
    """The host has no address now: nothing was sent."""


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
        raise AddressRefused(
            f"{target.host} resolves to an address that is not allowed (loopback, private, "
            "link-local, metadata, or an IPv6 address that embeds one; WEBHOOK_ALLOW_PRIVATE=1 "
            "allows all but metadata)"
        )
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
    prepared = session.prepare_request(
        requests.Request(method, target.url, headers=headers, data=data, json=json, auth=auth)
    )
    prepared.headers["Host"] = target.netloc
    prepared.pinned = (target, address)
    return session.send(prepared, allow_redirects=False, timeout=timeout, proxies={}, verify=session.verify)
