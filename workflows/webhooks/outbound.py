"""Address rules for calls to URLs that a plan or an operator names
(webhooks and `http.post`), so that a plan cannot make the server probe
the internal network (DESIGN §21.3).

The URL must be https, or http to a loopback host. The worker resolves
the host once, refuses an address that is not globally routable (loopback,
private, link-local, shared, reserved) unless WEBHOOK_ALLOW_PRIVATE is on,
and always refuses the cloud metadata addresses; it then connects to the
address it checked, sending the original Host and TLS server name (no
second lookup that a short-lived DNS answer could turn elsewhere), through
no proxy, and follows no redirects.
"""

from __future__ import annotations

import ipaddress
import os
import socket
import threading
from urllib.parse import urlsplit

import requests
from django.conf import settings
from requests.adapters import HTTPAdapter

from workflows.audit.redaction import find_credential

METADATA = {ipaddress.ip_address(a) for a in ("169.254.169.254", "fd00:ec2::254", "100.100.100.200")}
LOOPBACK_NAMES = {"localhost"}
MAX_URL_LENGTH = 2048


class AddressRefused(Exception):
    """The URL may not be called; the message says why (no secret in it)."""


class Unresolvable(Exception):
    """The host has no address now: nothing was sent."""


def scheme_problem(url: str) -> str | None:
    """Why this URL's scheme and host are not allowed, or None."""
    try:
        parts = urlsplit(url)
        parts.port  # noqa: B018  (raises on a bad port)
    except ValueError:
        return "Not a URL."
    if parts.scheme == "https" and parts.hostname:
        return None
    if parts.scheme == "http" and parts.hostname and _is_loopback_name(parts.hostname):
        return None
    return "Use https:// (http:// only to a loopback host such as 127.0.0.1)."


def url_problem(url: str) -> str | None:
    """Why a receiver's URL (a plan's callback_url, an endpoint's url) is
    refused when given, or None. Its address is checked when called."""
    if len(url) > MAX_URL_LENGTH:
        return f"At most {MAX_URL_LENGTH} characters."
    if problem := scheme_problem(url):
        return problem
    parts = urlsplit(url)
    if parts.username or parts.password or find_credential(url):
        return "Put no credentials in the URL: deliveries are signed (webhook-signature)."
    return None


def _is_loopback_name(host: str) -> bool:
    if host.lower() in LOOPBACK_NAMES:
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def refused(address: ipaddress.IPv4Address | ipaddress.IPv6Address) -> bool:
    mapped = getattr(address, "ipv4_mapped", None)
    if mapped is not None:
        address = mapped
    if address in METADATA:
        return True
    return not address.is_global and not settings.WEBHOOK_ALLOW_PRIVATE


def resolve(url: str) -> str:
    """The address to connect to for `url`, checked; raises AddressRefused.
    Every address the name resolves to must pass: a name that answers with
    one public and one private address is refused rather than raced."""
    if problem := scheme_problem(url):
        raise AddressRefused(problem)
    parts = urlsplit(url)
    port = parts.port or (443 if parts.scheme == "https" else 80)
    try:
        infos = socket.getaddrinfo(parts.hostname, port, type=socket.SOCK_STREAM)
    except (socket.gaierror, UnicodeError) as exc:
        raise Unresolvable(f"cannot resolve {parts.hostname}: {exc}") from None
    addresses = [ipaddress.ip_address(info[4][0].split("%")[0]) for info in infos]
    if not addresses:
        raise Unresolvable(f"{parts.hostname} has no address")
    if any(refused(address) for address in addresses):
        raise AddressRefused(f"{parts.hostname} resolves to an address that is not allowed (loopback, private, "
                             "link-local or metadata; WEBHOOK_ALLOW_PRIVATE=1 allows the first three)")
    return str(addresses[0])


class PinnedAdapter(HTTPAdapter):
    """Connects to the address the request was checked against
    (`request.pinned_address`), keeping the URL's host for SNI and the
    certificate check."""

    def build_connection_pool_key_attributes(self, request, verify, cert=None):
        host_params, pool_kwargs = super().build_connection_pool_key_attributes(request, verify, cert)
        hostname = host_params["host"]
        if host_params["scheme"] == "https":
            pool_kwargs["server_hostname"] = hostname
            pool_kwargs["assert_hostname"] = hostname
        host_params["host"] = request.pinned_address
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
    requests' hook on the prepared request (the approval proof)."""
    address = resolve(url)
    session = _session()
    prepared = session.prepare_request(requests.Request(method, url, headers=headers, data=data, json=json,
                                                        auth=auth))
    prepared.headers["Host"] = urlsplit(url).netloc.rpartition("@")[2]
    prepared.pinned_address = address
    return session.send(prepared, allow_redirects=False, timeout=timeout, proxies={}, verify=session.verify)
