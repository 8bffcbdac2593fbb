"""The HTTP plumbing of actions: the environment is read once per thread's
session (proxies per host, the CA bundle), and the worker's own ~/.netrc
logins never travel to a URL a plan names."""

import threading

from workflows.actions import transport


def fresh_thread(fn):
    """Run `fn` in a new thread: sessions and proxies are per thread."""
    out = {}
    thread = threading.Thread(target=lambda: out.update(value=fn()))
    thread.start()
    thread.join()
    return out["value"]


def test_proxies_follow_the_environment_and_no_proxy(monkeypatch):
    monkeypatch.setenv("HTTP_PROXY", "http://proxy.internal:3128")
    monkeypatch.setenv("NO_PROXY", "desk.internal")

    def look():
        transport.http_session()
        return transport._proxies_for("http://hooks.example/x"), transport._proxies_for("http://desk.internal/t")

    proxied, direct = fresh_thread(look)
    assert proxied.get("http") == "http://proxy.internal:3128"
    assert "http" not in direct


def test_a_session_reads_the_environment_once_not_per_request(monkeypatch):
    def look():
        session = transport.http_session()
        transport._proxies_for("http://hooks.example/x")
        monkeypatch.setenv("HTTP_PROXY", "http://other.internal:3128")
        return session, transport._proxies_for("http://hooks.example/y")

    monkeypatch.delenv("HTTP_PROXY", raising=False)
    session, proxies = fresh_thread(look)
    assert session.trust_env is False
    assert "http" not in proxies


def test_the_ca_bundle_of_the_environment_is_used(monkeypatch, tmp_path):
    bundle = tmp_path / "ca.pem"
    bundle.write_text("")
    monkeypatch.setenv("REQUESTS_CA_BUNDLE", str(bundle))
    assert fresh_thread(transport.http_session).verify == str(bundle)


def test_netrc_logins_are_not_sent_to_plan_urls(monkeypatch, tmp_path, desk):
    netrc = tmp_path / ".netrc"
    host = desk.url.split("//")[1].split(":")[0]
    netrc.write_text(f"machine {host} login worker password do-not-send\n")
    netrc.chmod(0o600)
    monkeypatch.setenv("NETRC", str(netrc))

    def call():
        return transport.call("GET", f"{desk.url}/tickets").request.headers

    headers = fresh_thread(call)
    assert "Authorization" not in headers
