"""The approval proof carried to the effect (docs/explanation/approval-proofs.md#approval-proof): every remote write
carries a JWS, signed with the console's Ed25519 key, over exactly that
request; a receiver (here the real ticket desk) refuses writes without one;
a refusal is PERMISSION_DENIED, and a replay sends a fresh proof under the
same operation key."""

import base64
import hashlib
import hmac
import json
import subprocess
import sys
import time
from datetime import UTC, timedelta
from pathlib import Path

import pytest
from cryptography.hazmat.primitives.asymmetric.ed25519 import Ed25519PrivateKey
from django.core.management import call_command
from joserfc.jwk import OKPKey

from durableconsole import proof
from tests.support import deciding as decide
from tests.support.desk import TicketDesk, TicketDeskError, console_jwks_file
from tests.support.plans import ticket_plan
from tests.support.processes import manage
from tests.support.receiver import Receiver
from tests.support.running import run_until
from workflows.actions import ActionError, PerformContext
from workflows.actions.context import performing
from workflows.actions.transport import call
from workflows.audit import signing
from workflows.models import Attempt, DeadLetter
from workflows.operations import compensation, deadletters, plans

# Also run through PgBouncer in transaction mode (make test-pooled).
pytestmark = pytest.mark.pooled

PROJECT_DIR = Path(__file__).resolve().parents[2]
DESK = "http://127.0.0.1:8100"
URL = f"{DESK}/tickets"
BODY = b'{"title":"Printer on fire"}'


def b64(raw: bytes) -> str:
    return base64.urlsafe_b64encode(raw).rstrip(b"=").decode()


def claims(**changes) -> dict:
    now = int(time.time())
    return {
        "iss": "http://console",
        "aud": DESK,
        "jti": "j-1",
        "iat": now,
        "exp": now + 300,
        "wf": "wf-1",
        "rev": 1,
        "plan_hash": "h" * 64,
        "step": "open",
        "action": "ticket.create",
        "op": "op-1",
        "htm": "POST",
        "htu": URL,
        "body_sha256": hashlib.sha256(BODY).hexdigest(),
        "args_sha256": "a" * 64,
        "approvers": [{"sub": "7", "at": "2026-12-02T04:00:00Z"}],
        "policy_version": 1,
        **changes,
    }


def compact(header: dict, payload: dict, private: Ed25519PrivateKey | None) -> str:
    """A token put together by hand, as an attacker would."""
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    signature = private.sign(signing_input.encode()) if private else b""
    return f"{signing_input}.{b64(signature)}"


@pytest.fixture
def key():
    private = Ed25519PrivateKey.generate()
    raw = private.public_key().public_bytes_raw()
    return {
        "private": private,
        "kid": "k-1",
        "jwks": {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": b64(raw), "kid": "k-1", "alg": "EdDSA", "use": "sig"}]},
    }


def okp(private: Ed25519PrivateKey) -> OKPKey:
    return OKPKey.import_key(
        {
            "kty": "OKP",
            "crv": "Ed25519",
            "x": b64(private.public_key().public_bytes_raw()),
            "d": b64(private.private_bytes_raw()),
        }
    )


def verify(token, key, **request):
    return proof.verify(
        token,
        **{
            "method": "POST",
            "url": URL,
            "body": BODY,
            "idempotency_key": "op-1",
            "jwks": key["jwks"],
            "audience": DESK,
            **request,
        },
    )


# --- the verifier ------------------------------------------------------------------


def test_a_proof_of_this_exact_request_verifies_and_gives_its_claims(key):
    token = proof.sign(claims(), key=okp(key["private"]), kid="k-1")
    assert proof.header_of(token) == {"alg": "EdDSA", "typ": "approval-proof+jwt", "kid": "k-1"}
    assert verify(token, key, method="post")["approvers"] == [{"sub": "7", "at": "2026-12-02T04:00:00Z"}]


def test_a_forged_signature_is_refused(key):
    forger = Ed25519PrivateKey.generate()
    with pytest.raises(proof.InvalidProof, match="signature"):
        verify(proof.sign(claims(), key=okp(forger), kid="k-1"), key)
    token = proof.sign(claims(), key=okp(key["private"]), kid="k-1")
    head, payload, signature = token.split(".")
    altered = b64(json.dumps(claims(approvers=[{"sub": "1", "at": "2026-12-02T04:00:00Z"}])).encode())
    with pytest.raises(proof.InvalidProof, match="signature"):
        verify(f"{head}.{altered}.{signature}", key)


def test_alg_none_is_refused(key):
    token = compact({"alg": "none", "typ": proof.TYP, "kid": "k-1"}, claims(), None)
    with pytest.raises(proof.InvalidProof, match="alg 'none' is refused"):
        verify(token, key)


def test_an_hs256_token_keyed_with_the_public_key_is_refused(key):
    """The classic confusion: HMAC under the (public) key bytes."""
    header, payload = {"alg": "HS256", "typ": proof.TYP, "kid": "k-1"}, claims()
    signing_input = f"{b64(json.dumps(header).encode())}.{b64(json.dumps(payload).encode())}"
    secret = key["jwks"]["keys"][0]["x"].encode()
    token = f"{signing_input}.{b64(hmac.new(secret, signing_input.encode(), hashlib.sha256).digest())}"
    with pytest.raises(proof.InvalidProof, match="alg 'HS256' is refused"):
        verify(token, key)


@pytest.mark.parametrize("carried", ["jku", "jwk", "x5u", "x5c"])
def test_a_token_that_names_its_own_key_is_refused(key, carried):
    header = {"alg": "EdDSA", "typ": proof.TYP, "kid": "k-1", carried: "https://attacker.example/keys"}
    with pytest.raises(proof.InvalidProof, match=f"header {carried} refused"):
        verify(compact(header, claims(), key["private"]), key)


def test_a_wrong_typ_is_refused(key):
    token = compact({"alg": "EdDSA", "typ": "JWT", "kid": "k-1"}, claims(), key["private"])
    with pytest.raises(proof.InvalidProof, match="typ"):
        verify(token, key)


def test_an_unknown_kid_is_refused(key):
    with pytest.raises(proof.UnknownKey, match="unknown kid 'k-2'"):
        verify(proof.sign(claims(), key=okp(key["private"]), kid="k-2"), key)


def test_an_expired_proof_is_refused_past_the_leeway(key):
    now = int(time.time())
    stale = proof.sign(claims(iat=now - 400, exp=now - 100), key=okp(key["private"]), kid="k-1")
    with pytest.raises(proof.InvalidProof, match="expired"):
        verify(stale, key)
    just_expired = proof.sign(claims(iat=now - 310, exp=now - 10), key=okp(key["private"]), kid="k-1")
    assert verify(just_expired, key)["jti"] == "j-1"  # within the 30 s leeway for clock skew
    with pytest.raises(proof.InvalidProof, match="expired"):
        verify(just_expired, key, leeway=0)


@pytest.mark.parametrize(
    "changed, match",
    [
        ({"body": b'{"title":"Printer fine"}'}, "body_sha256"),
        ({"url": f"{DESK}/tickets/1/close"}, "htu"),
        ({"url": f"{URL}?title=other"}, "htu"),
        ({"method": "PUT"}, "htm"),
        ({"audience": "http://127.0.0.1:8101"}, "aud"),
    ],
)
def test_a_request_changed_after_signing_is_refused(key, changed, match):
    token = proof.sign(claims(), key=okp(key["private"]), kid="k-1")
    with pytest.raises(proof.InvalidProof, match=match):
        verify(token, key, **changed)


def test_a_proof_replayed_with_another_idempotency_key_is_refused(key):
    token = proof.sign(claims(), key=okp(key["private"]), kid="k-1")
    with pytest.raises(proof.InvalidProof, match="Idempotency-Key"):
        verify(token, key, idempotency_key="op-2")
    with pytest.raises(proof.InvalidProof, match="Idempotency-Key"):
        verify(token, key, idempotency_key=None)


def test_no_proof_at_all_is_refused(key):
    for missing in (None, ""):
        with pytest.raises(proof.InvalidProof, match="no Approval-Proof"):
            verify(missing, key)
    with pytest.raises(proof.InvalidProof, match="compact JWS"):
        verify("not.a-token", key)


def test_the_verifier_imports_without_django():
    code = "import sys, durableconsole.proof; assert 'django' not in sys.modules, sorted(sys.modules)"
    subprocess.run([sys.executable, "-c", code], cwd=PROJECT_DIR, check=True, timeout=60)


# --- the console's side ------------------------------------------------------------


def _submit(people, plan):
    workflow = plans.submit(people["agent"], plan).workflow
    return decide.approve(workflow, by=people["reviewer"])


def _at(moment) -> str:
    return moment.astimezone(UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def test_each_write_carries_a_proof_of_exactly_that_request(people, settings):
    """An http.post to a receiver that keeps what it got: the proof verifies
    against the console's published key set for the exact bytes received,
    and names the workflow, step, operation key, approvers and policy."""
    with Receiver() as receiver:
        url = f"{receiver.url}/hooks/deploy?env=prod"
        plan = {
            "name": "Tell the deploy hook",
            "submission_key": "hook-1",
            "steps": [
                {
                    "key": "notify",
                    "action": "http.post",
                    "args": {"url": url, "json": {"version": "2.3", "note": "ünïcode"}},
                }
            ],
        }
        workflow = _submit(people, plan)
        run_until(workflow.pk, "COMPLETE")
        [got] = receiver.requests
    step = workflow.steps.get()
    attempt = step.attempts.get()
    approval = workflow.approvals.get()
    claims_ = proof.verify(
        got["headers"]["approval-proof"],
        method="POST",
        url=url,
        body=got["body"],
        idempotency_key=got["headers"]["idempotency-key"],
        jwks=signing.jwks(),
        audience=proof.origin(receiver.url),
    )
    assert claims_["op"] == step.operation_key == got["headers"]["idempotency-key"]
    assert (claims_["wf"], claims_["rev"], claims_["plan_hash"]) == (str(workflow.pk), 1, workflow.plan_hash)
    assert (claims_["step"], claims_["action"], claims_["policy_version"]) == (
        "notify",
        "http.post",
        attempt.policy_version,
    )
    assert claims_["approvers"] == [{"sub": str(people["reviewer"].pk), "at": _at(approval.created_at)}]
    assert claims_["iss"] == settings.CONSOLE_URL and claims_["exp"] - claims_["iat"] == 300
    assert (
        claims_["args_sha256"]
        == hashlib.sha256(
            json.dumps(step.args, sort_keys=True, separators=(",", ":"), ensure_ascii=False).encode()
        ).hexdigest()
    )
    # The attempt records the proof's key id, unique id and approvers, not the token.
    assert (attempt.proof_kid, attempt.proof_jti) == (signing.current().kid, claims_["jti"])
    assert attempt.proof_approvers == claims_["approvers"]
    assert proof.header_of(got["headers"]["approval-proof"])["kid"] == attempt.proof_kid


def test_reads_carry_no_proof_and_writes_outside_an_effect_none_either():
    with Receiver() as receiver:
        context = PerformContext(
            workflow_id="w",
            revision=1,
            plan_hash="h",
            step="s",
            action="a",
            operation_key="op",
            approvers=[],
            policy_version=1,
            args_sha256="x",
        )
        with performing(context):
            with pytest.raises(ActionError):
                call("GET", f"{receiver.url}/read")  # the receiver answers GET with 501
            call("POST", f"{receiver.url}/write", operation_key="op", json={"a": 1})
        call("POST", f"{receiver.url}/outside", operation_key="op", json={"a": 1})
        seen = [(r["path"], "approval-proof" in r["headers"]) for r in receiver.requests]
    assert seen == [("/hook/write", True), ("/hook/outside", False)]


def test_the_ticket_desk_ledger_records_the_proof_of_every_change(people, proof_desk):
    workflow = _submit(people, ticket_plan("ledger-1"))
    run_until(workflow.pk, "COMPLETE")
    ledger = proof_desk.ledger()
    attempts = {a.operation_key: a for a in Attempt.objects.filter(step__workflow=workflow)}
    assert [entry["path"].split("/")[-1] for entry in ledger] == ["tickets", "comments", "close"]
    for entry in ledger:
        attempt = attempts[entry["idempotency_key"]]
        assert entry["proof"] == {
            "wf": str(workflow.pk),
            "approvers": attempt.proof_approvers,
            "kid": attempt.proof_kid,
            "jti": attempt.proof_jti,
        }
        assert entry["proof"]["approvers"][0]["sub"] == str(people["reviewer"].pk)
    assert len({entry["proof"]["jti"] for entry in ledger}) == 3


def test_the_desk_refuses_a_write_without_a_valid_proof_and_changes_nothing(proof_desk):
    refused = proof_desk.request("POST", "/tickets", json={"title": "t"}, headers={"Idempotency-Key": "k"})
    assert refused.status_code == 403
    assert refused.json()["error"]["code"] == "approval_proof_invalid"
    assert "no Approval-Proof header" in refused.json()["error"]["message"]
    forged = compact({"alg": "none", "typ": proof.TYP, "kid": signing.current().kid}, claims(), None)
    refused = proof_desk.request(
        "POST", "/tickets", json={"title": "t"}, headers={"Idempotency-Key": "k", "Approval-Proof": forged}
    )
    assert refused.status_code == 403 and "alg 'none'" in refused.json()["error"]["message"]
    assert proof_desk.tickets() == [] and proof_desk.ledger() == []  # reads need no proof


def test_gate_approvals_are_among_the_approvers_of_the_gated_step(people, proof_desk):
    plan = {
        "name": "Open, then close once looked at",
        "submission_key": "gated-proof",
        "steps": [
            {"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire"}},
            {
                "key": "close",
                "action": "ticket.close",
                "args": {"ticket_id": {"$from": "open.result.id"}},
                "gate": {"approvals": 1, "note": "look first"},
            },
        ],
    }
    workflow = _submit(people, plan)
    run_until(workflow.pk, "WAITING_GATE")
    decide.gate_approve(workflow, "close", by=people["reviewer2"])
    run_until(workflow.pk, "COMPLETE")
    opened, closed = (Attempt.objects.get(step__workflow=workflow, step__key=key) for key in ("open", "close"))
    reviewer, reviewer2 = str(people["reviewer"].pk), str(people["reviewer2"].pk)
    assert [a["sub"] for a in opened.proof_approvers] == [reviewer]
    assert [a["sub"] for a in closed.proof_approvers] == [reviewer, reviewer2]
    assert proof_desk.ledger()[-1]["proof"]["approvers"] == closed.proof_approvers


def test_a_compensation_names_its_requester_and_its_authorizer(people, proof_desk):
    workflow = _submit(
        people,
        ticket_plan(
            "undo-proof", steps=[{"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire"}}]
        ),
    )
    run_until(workflow.pk, "COMPLETE")
    comp = compensation.request(workflow, by=people["operator"], reason="opened by mistake")
    decide.authorize(comp, by=people["reviewer2"])
    run_until(workflow.pk, "COMPENSATED")
    undo = Attempt.objects.get(step__workflow=workflow, step__lane__gt=0)
    assert [a["sub"] for a in undo.proof_approvers] == [str(people["operator"].pk), str(people["reviewer2"].pk)]
    assert proof_desk.ledger()[-1]["proof"] == {
        "wf": str(workflow.pk),
        "approvers": undo.proof_approvers,
        "kid": undo.proof_kid,
        "jti": undo.proof_jti,
    }


def test_a_refused_proof_is_dead_lettered_unretried_and_a_replay_sends_a_fresh_one(people, settings, tmp_path):
    """A desk given the wrong key set refuses the write (403): the step is
    dead-lettered at once with the desk's reason. Once the desk trusts the
    console's keys, a replay sends a new proof (new jti) under the same
    operation key, and the ticket is made once."""
    wrong = Ed25519PrivateKey.generate().public_key().public_bytes_raw()
    wrong_jwks = tmp_path / "wrong-jwks.json"
    wrong_jwks.write_text(
        json.dumps(
            {"keys": [{"kty": "OKP", "crv": "Ed25519", "x": b64(wrong), "kid": signing.current().kid, "alg": "EdDSA"}]}
        )
    )
    with TicketDesk(tmp_path / "desk.sqlite3", require_proofs=wrong_jwks) as desk:
        settings.TICKET_DESK_URL = desk.url
        workflow = _submit(
            people,
            ticket_plan(
                "refused", steps=[{"key": "open", "action": "ticket.create", "args": {"title": "Printer on fire"}}]
            ),
        )
        run_until(workflow.pk, "FAILED")
        step = workflow.steps.get()
        [first] = step.attempts.all()
        assert (step.status, first.failure_class) == ("DEAD_LETTERED", "PERMISSION_DENIED")
        dead = DeadLetter.objects.get(step=step)
        assert dead.attempt_count == 1
        assert "refused the approval proof" in dead.trace.error and "signature does not verify" in dead.trace.error
        assert desk.ledger() == [] and desk.tickets() == []

        desk.stop()
        desk.require_proofs = console_jwks_file(tmp_path / "jwks.json")
        desk.start()
        deadletters.replay(dead, by=people["operator"], reason="the desk trusts our keys now")
        run_until(workflow.pk, "COMPLETE")
        second = step.attempts.get(number=2)
        [entry] = desk.ledger()
        assert second.operation_key == first.operation_key == entry["idempotency_key"] == step.operation_key
        assert entry["proof"]["jti"] == second.proof_jti != first.proof_jti
        assert len(desk.tickets()) == 1


def test_key_rotation_keeps_the_retired_key_verifying_during_the_overlap(settings, tmp_path):
    settings.SIGNING_KEYS_FILE = str(tmp_path / "signing-keys.json")
    settings.SIGNING_KEY_OVERLAP_HOURS = 24
    call_command("signing_key", "--new")
    old_kid = signing.current().kid
    # An attempt requested under the old key...
    context = PerformContext(
        workflow_id="w",
        revision=1,
        plan_hash="h",
        step="s",
        action="ticket.create",
        operation_key="op-1",
        approvers=[],
        policy_version=1,
        args_sha256="x",
        kid=old_kid,
    )
    before = context.proof("POST", URL, BODY)
    call_command("signing_key", "--new")
    new_kid = signing.current().kid
    call_command("signing_key", "--retire", old_kid)
    published = signing.jwks()
    assert [k["kid"] for k in published["keys"]] == [new_kid, old_kid]
    request = {"method": "POST", "url": URL, "body": BODY, "idempotency_key": "op-1", "audience": DESK}
    assert proof.verify(before, jwks=published, **request)["jti"] == context.jti
    # ...sends later with the current key: the retired one signs nothing more.
    after = context.proof("POST", URL, BODY)
    assert proof.header_of(after)["kid"] == new_kid
    assert proof.verify(after, jwks=published, **request)["jti"] == f"{context.jti}.2"
    # Past the overlap, the retired key is no longer published and its proofs fail.
    retired_at = signing.keyset().by_id(old_kid).retired
    later = signing.keyset().published(now=retired_at + timedelta(hours=25))
    with pytest.raises(proof.UnknownKey):
        proof.verify(before, jwks={"keys": [k.jwk() for k in later]}, **request)


def test_the_desk_takes_the_console_jwks_url_on_loopback_only(live_server, tmp_path):
    desk = TicketDesk(tmp_path / "desk.sqlite3", require_proofs=f"{live_server.url}/.well-known/jwks.json")
    with desk:
        context = PerformContext(
            workflow_id="w",
            revision=1,
            plan_hash="h",
            step="s",
            action="ticket.create",
            operation_key="op-9",
            approvers=[],
            policy_version=1,
            args_sha256="x",
        )
        body = json.dumps({"title": "By hand"}).encode()
        token = context.proof("POST", f"{desk.url}/tickets", body)
        made = desk.request("POST", "/tickets", data=body, headers={"Idempotency-Key": "op-9", "Approval-Proof": token})
        assert made.status_code == 201, made.text
        assert desk.ledger()[0]["proof"]["jti"] == context.jti
    far = TicketDesk(
        tmp_path / "far.sqlite3", require_proofs="http://console.example.com/.well-known/jwks.json", start_timeout=20
    )
    with pytest.raises(TicketDeskError, match="plain http"):
        far.start()
    done = manage("ticketdesk", "--jwks", "jwks.json")
    assert done.returncode != 0 and "--require-approval-proof" in done.stderr


def test_the_desk_learns_a_rotated_in_key_without_a_restart(settings, tmp_path):
    settings.SIGNING_KEYS_FILE = str(tmp_path / "signing-keys.json")
    call_command("signing_key", "--new")
    jwks = console_jwks_file(tmp_path / "jwks.json")
    with TicketDesk(tmp_path / "desk.sqlite3", require_proofs=jwks) as desk:
        call_command("signing_key", "--new")  # the console rotates; the desk's file follows
        console_jwks_file(jwks)
        context = PerformContext(
            workflow_id="w",
            revision=1,
            plan_hash="h",
            step="s",
            action="ticket.create",
            operation_key="op-r",
            approvers=[],
            policy_version=1,
            args_sha256="x",
        )
        body = json.dumps({"title": "After rotation"}).encode()
        made = desk.request(
            "POST",
            "/tickets",
            data=body,
            headers={"Idempotency-Key": "op-r", "Approval-Proof": context.proof("POST", f"{desk.url}/tickets", body)},
        )
        assert made.status_code == 201, made.text
        assert desk.ledger()[0]["proof"]["kid"] == signing.current().kid
