"""Who is asking: the client address (X-Forwarded-For believed only from
TRUSTED_PROXIES) and, for an SSO session, the provider's subject and issuer,
handed to the audit journal for the events this request writes
(workflows.audit.identity). The API adds its token when it checks it."""

from __future__ import annotations

import ipaddress
from functools import lru_cache

from django.conf import settings
from django.http import HttpRequest

from workflows.audit import identity
from workflows.operations.sessions import SSO_SESSION_KEY


@lru_cache(maxsize=8)
def _networks(trusted: tuple[str, ...]) -> tuple:
    return tuple(ipaddress.ip_network(item, strict=False) for item in trusted)


def _address(text: str):
    try:
        return ipaddress.ip_address(text.strip())
    except ValueError:
        return None


def client_address(request: HttpRequest) -> str:
    """The direct peer, unless it is a trusted proxy: then X-Forwarded-For is
    read from the right, past every trusted proxy, and the first address not
    trusted is the client. A malformed entry stops the walk at the last
    address known good (what a client writes to the left of it proves nothing)."""
    peer = _address(request.META.get("REMOTE_ADDR", ""))
    if peer is None:
        return ""
    trusted = _networks(tuple(settings.TRUSTED_PROXIES))

    def is_trusted(address) -> bool:
        return any(address.version == net.version and address in net for net in trusted)

    client = peer
    if is_trusted(peer):
        hops = request.META.get("HTTP_X_FORWARDED_FOR", "").split(",")
        for hop in reversed(hops):
            address = _address(hop)
            if address is None:
                break
            client = address
            if not is_trusted(address):
                break
    return str(client)


def axes_client_address(request: HttpRequest) -> str:
    """django-axes locks out by the same address the audit trail records."""
    return client_address(request)


class RequestIdentity:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request: HttpRequest):
        user = getattr(request, "user", None)
        sso = request.session.get(SSO_SESSION_KEY) if hasattr(request, "session") else None
        requester = identity.Requester(client_address=client_address(request))
        if user is not None and user.is_authenticated:
            requester = identity.Requester(
                username=user.get_username(),
                client_address=requester.client_address,
                **(
                    {"subject": str(sso.get("sub", "")), "issuer": str(sso.get("iss", ""))}
                    if isinstance(sso, dict)
                    else {}
                ),
            )
        token = identity.begin(requester)
        try:
            return self.get_response(request)
        finally:
            identity.end(token)
