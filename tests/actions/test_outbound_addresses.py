"""Outbound address rules (docs/explanation/agents.md#webhooks) for webhooks and `http.post`: the
worker resolves the host once, refuses loopback, private, link-local and
metadata addresses unless WEBHOOK_ALLOW_PRIVATE=1, connects to the address
it checked, and follows no redirects.

The resolver is swapped for one whose answers the test chooses (names
cannot be pointed at 10.x or 169.254.169.254 otherwise); every connection
is real."""

import io
import socket

import pytest
from django.core.management import call_command

from tests.support.receiver import Receiver
from workflows.actions import ActionError
from workflows.actions.webhooks import HttpPost
from workflows.webhooks import delivery, outbound
from workflows.webhooks.models import WebhookDelivery


@pytest.fixture
def resolver(monkeypatch):
    """Answers `answers[name]` (popping one per lookup when a list of
    lists); other names resolve for real. Records every lookup."""
    real = socket.getaddrinfo
    answers, lookups = {}, []

    def getaddrinfo(host, port, *args, **kwargs):
        lookups.append(host)
        if host not in answers:
            return real(host, port, *args, **kwargs)
        address = answers[host].pop(0) if isinstance(answers[host], list) else answers[host]
        family = socket.AF_INET6 if ":" in address else socket.AF_INET
        return [(family, socket.SOCK_STREAM, 6, "", (address, port))]

    monkeypatch.setattr(socket, "getaddrinfo", getaddrinfo)
    return answers, lookups


@pytest.mark.parametrize("address", ["127.0.0.1", "10.1.2.3", "169.254.169.254", "192.168.0.9", "::1"])
def test_a_name_resolving_to_an_internal_address_is_refused(settings, resolver, address):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    answers, _ = resolver
    answers["hooks.example.com"] = address
    with pytest.raises(outbound.AddressRefused):
        outbound.send("POST", "https://hooks.example.com/in", headers={}, timeout=1, data=b"{}")


def test_private_addresses_are_allowed_by_the_setting_but_metadata_never(settings, resolver):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    answers, _ = resolver
    answers["hooks.example.com"] = "10.1.2.3"
    assert outbound.resolve(outbound.parse("https://hooks.example.com/in")) == "10.1.2.3"
    for metadata in ("169.254.169.254", "169.254.170.2"):
        answers["hooks.example.com"] = metadata
        with pytest.raises(outbound.AddressRefused):
            outbound.resolve(outbound.parse("https://hooks.example.com/in"))


def test_a_name_with_one_internal_address_among_public_ones_is_refused(settings, resolver, monkeypatch):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    real = socket.getaddrinfo
    monkeypatch.setattr(
        socket,
        "getaddrinfo",
        lambda host, port, *a, **k: (
            [
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
                (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
            ]
            if host == "hooks.example.com"
            else real(host, port, *a, **k)
        ),
    )
    with pytest.raises(outbound.AddressRefused):
        outbound.resolve(outbound.parse("https://hooks.example.com/in"))


def test_http_is_refused_except_to_a_loopback_host():
    assert outbound.scheme_problem("http://hooks.example.com/in")
    assert outbound.scheme_problem("http://127.0.0.1:9/in") is None
    assert outbound.scheme_problem("http://localhost:9/in") is None
    assert outbound.scheme_problem("https://hooks.example.com/in") is None


def test_the_worker_connects_to_the_address_it_checked_without_a_second_lookup(resolver):
    answers, lookups = resolver
    with Receiver() as receiver:
        port = receiver.server.server_port
        # A second lookup would get an address where nothing listens.
        answers["localhost"] = ["127.0.0.1", "127.0.0.2"]
        response = outbound.send(
            "POST", f"http://localhost:{port}/in", headers={"webhook-id": "msg_1"}, timeout=5, data=b"{}"
        )
    assert response.status_code == 200
    assert lookups.count("localhost") == 1
    assert receiver.requests[0]["headers"]["host"] == f"localhost:{port}"


def test_http_post_refuses_a_loopback_receiver_without_the_setting(settings):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    with Receiver() as receiver:
        with pytest.raises(ActionError) as refused:
            HttpPost().perform({"url": receiver.url, "json": {"a": 1}}, "op-1")
    assert refused.value.failure_class == "POLICY_FAILED"
    assert receiver.requests == []


def test_http_post_follows_no_redirect():
    with Receiver(statuses=[302]) as receiver:
        with pytest.raises(ActionError):
            HttpPost().perform({"url": receiver.url, "json": {"a": 1}}, "op-1")
    assert [r["path"] for r in receiver.requests] == ["/hook"]


@pytest.mark.django_db(transaction=True)
def test_a_webhook_follows_no_redirect_and_a_refused_address_dead_letters_at_once(api, settings):
    call_command("webhook_secret", "agent", stdout=io.StringIO())
    settings.WEBHOOK_RETRY_SECONDS = 60
    with Receiver(statuses=[302]) as receiver:
        workflow_id = (
            api["agent"]
            .post(
                "/workflows",
                {
                    "name": "p",
                    "submission_key": "k",
                    "callback_url": receiver.url,
                    "steps": [{"key": "one", "action": "noop", "args": {}}],
                },
            )
            .json()["id"]
        )
        api["reviewer"].post(f"/workflows/{workflow_id}/reject", {"comment": "no"})
        delivery.deliver_due()
        row = WebhookDelivery.objects.get()
        assert (row.status, row.last_status_code) == ("PENDING", 302)
        assert "redirect" in row.last_error
        assert [r["path"] for r in receiver.requests] == ["/hook"]

        settings.WEBHOOK_ALLOW_PRIVATE = False
        WebhookDelivery.objects.update(next_attempt_at=row.created_at)
        delivery.deliver_due()
    row.refresh_from_db()
    assert row.status == "DEAD" and "not allowed" in row.last_error
    assert len(receiver.requests) == 1


# --- one parse, checked and connected to (docs/explanation/decisions.md#bound-decisions) ------------------------------


@pytest.mark.parametrize(
    "embedding",
    [
        "64:ff9b::a01:203",  # NAT64 of 10.1.2.3
        "64:ff9b:1::7f00:1",  # local-use NAT64 of 127.0.0.1
        "2002:a01:203::1",  # 6to4 of 10.1.2.3
        "2001:0:4136:e378:8000:63bf:f5fe:fdfc",  # Teredo, client 10.1.2.3
        "::ffff:a01:203",  # IPv4-mapped 10.1.2.3
    ],
)
def test_an_ipv6_address_that_embeds_a_private_ipv4_is_refused(settings, resolver, embedding):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    answers, _ = resolver
    answers["hooks.example.com"] = embedding
    with pytest.raises(outbound.AddressRefused):
        outbound.send("POST", "https://hooks.example.com/in", headers={}, timeout=1, data=b"{}")
    # As a literal in the URL too.
    with pytest.raises(outbound.AddressRefused):
        outbound.send("POST", f"https://[{embedding}]/in", headers={}, timeout=1, data=b"{}")


@pytest.mark.parametrize(
    "embedding",
    [
        "64:ff9b::a9fe:a9fe",  # NAT64 of 169.254.169.254
        "2002:a9fe:aa02::",  # 6to4 of 169.254.170.2
        "2001:0:4136:e378:8000:63bf:5601:5601",  # Teredo, client 169.254.169.254
    ],
)
def test_an_ipv6_address_that_embeds_a_metadata_address_is_refused_even_when_private_ones_are_allowed(
    settings, resolver, embedding
):
    settings.WEBHOOK_ALLOW_PRIVATE = True
    answers, _ = resolver
    answers["hooks.example.com"] = embedding
    with pytest.raises(outbound.AddressRefused):
        outbound.resolve(outbound.parse("https://hooks.example.com/in"))


def test_an_ipv6_address_that_embeds_a_public_ipv4_passes(settings, resolver):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    answers, _ = resolver
    answers["hooks.example.com"] = "64:ff9b::5db8:d822"  # NAT64 of 93.184.216.34
    assert outbound.resolve(outbound.parse("https://hooks.example.com/in")) == "64:ff9b::5db8:d822"


@pytest.mark.parametrize(
    "url",
    [
        "http://127.0.0.1\\@evil.example/in",  # urllib3 reads host 127.0.0.1, urlsplit evil.example
        "http://evil.example\\@127.0.0.1/in",
        "http://evil.example#@127.0.0.1/in",  # a fragment that looks like userinfo
        "http://user:pw@127.0.0.1/in",
        "http://evil.example:80@127.0.0.1/in",
        "http://127.0.0.1 /in",
        "http://127.1/in",  # resolvers read 127.0.0.1; ipaddress does not
        "http://0x7f.0.0.1/in",
        "http://[fe80::1%25lo]/in",
        "https://hooks.example.com/%zz",
        "https://bücher.example/in",
    ],
)
def test_a_url_that_parsers_could_read_differently_is_refused_at_submission_and_at_send(api, url):
    answer = api["agent"].post(
        "/workflows",
        {
            "name": "n",
            "submission_key": "k",
            "steps": [{"key": "hook", "action": "http.post", "args": {"url": url, "json": {}}}],
        },
    )
    assert answer.status_code == 400 and "steps.0.args.url" in answer.json()["error"]["fields"]
    with pytest.raises(outbound.AddressRefused):
        outbound.send("POST", url, headers={}, timeout=1, data=b"{}")


def test_userinfo_is_refused_at_submission_and_at_send(api):
    """At send: a URL taken from an earlier step's result is checked only then."""
    with Receiver() as receiver:
        url = receiver.url.replace("http://", "http://user:pw@")
        answer = api["agent"].post(
            "/workflows",
            {
                "name": "n",
                "submission_key": "k",
                "steps": [{"key": "hook", "action": "http.post", "args": {"url": url, "json": {}}}],
            },
        )
        assert answer.json()["error"]["fields"]["steps.0.args.url"] == "Put no user or password in the URL (user@host)."
        with pytest.raises(ActionError) as refused:
            HttpPost().perform({"url": url, "json": {"a": 1}}, "op-1")
        assert refused.value.failure_class == "POLICY_FAILED" and "user or password" in refused.value.message
        callback = api["agent"].post(
            "/workflows",
            {
                "name": "n",
                "submission_key": "k2",
                "callback_url": url,
                "steps": [{"key": "one", "action": "noop", "args": {}}],
            },
        )
        assert "user or password" in callback.json()["error"]["fields"]["callback_url"]
    assert receiver.requests == []


def test_the_host_checked_is_the_host_connected_to_and_named(resolver):
    """`?@` and `/@` after the host are a query and a path: every reader
    agrees the host is `localhost`, which is what is looked up, connected
    to, and named in the Host header; the request line carries the rest."""
    answers, lookups = resolver
    with Receiver() as receiver:
        port = receiver.server.server_port
        answers["localhost"] = "127.0.0.1"
        answers["evil.example"] = "127.0.0.2"  # never to be asked
        for url in (f"http://localhost:{port}?@evil.example/", f"http://localhost:{port}/@evil.example/"):
            outbound.send("POST", url, headers={}, timeout=5, data=b"{}")
    # The name is looked up once per request; the connection goes to the checked address.
    assert lookups == ["localhost", "127.0.0.1"] * 2
    assert [(r["headers"]["host"], r["path"]) for r in receiver.requests] == [
        (f"localhost:{port}", "/?@evil.example/"),
        (f"localhost:{port}", "/@evil.example/"),
    ]


def test_the_parsed_form_is_what_is_sent():
    target = outbound.parse("HTTPS://Hooks.Example.COM:443/in?x=1")
    assert (target.scheme, target.host, target.port, target.path) == ("https", "hooks.example.com", 443, "/in?x=1")
    assert target.url == "https://hooks.example.com/in?x=1"
    assert outbound.parse("http://[::1]:8080").url == "http://[::1]:8080/"
