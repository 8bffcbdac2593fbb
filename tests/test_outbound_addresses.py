"""Outbound address rules (DESIGN §21.3) for webhooks and `http.post`: the
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

from tests.receiver import Receiver
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
    assert outbound.resolve("https://hooks.example.com/in") == "10.1.2.3"
    answers["hooks.example.com"] = "169.254.169.254"
    with pytest.raises(outbound.AddressRefused):
        outbound.resolve("https://hooks.example.com/in")


def test_a_name_with_one_internal_address_among_public_ones_is_refused(settings, resolver, monkeypatch):
    settings.WEBHOOK_ALLOW_PRIVATE = False
    real = socket.getaddrinfo
    monkeypatch.setattr(socket, "getaddrinfo", lambda host, port, *a, **k: [
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("93.184.216.34", port)),
        (socket.AF_INET, socket.SOCK_STREAM, 6, "", ("10.0.0.1", port)),
    ] if host == "hooks.example.com" else real(host, port, *a, **k))
    with pytest.raises(outbound.AddressRefused):
        outbound.resolve("https://hooks.example.com/in")


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
        response = outbound.send("POST", f"http://localhost:{port}/in", headers={"webhook-id": "msg_1"},
                                 timeout=5, data=b"{}")
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
        workflow_id = api["agent"].post("/workflows", {
            "name": "p", "submission_key": "k", "callback_url": receiver.url,
            "steps": [{"key": "one", "action": "noop", "args": {}}]}).json()["id"]
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
