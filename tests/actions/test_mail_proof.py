"""The approval proof reaches email too (docs/explanation/decisions.md#bound-decisions): `email.send` hands a
real SMTP server (tests.support.smtp) a message whose `Approval-Proof` and
`Idempotency-Key` headers bind it to its approval; `htm` is SMTP, `htu` and
`aud` the sorted recipients, `body_sha256` the text body as sent, and the
receiver's verifier (`durableconsole.proof.verify`) accepts exactly that
message and nothing altered."""

import pytest

from durableconsole import proof
from tests.support import deciding as decide
from tests.support.running import run_until
from tests.support.smtp import SmtpReceiver
from workflows.actions import PerformContext
from workflows.actions.context import performing
from workflows.actions.mail import EmailSend
from workflows.audit import signing
from workflows.operations import plans

# Unicode, a line that starts with a dot (SMTP stuffs it), bare LF and CR
# line endings, and a line too long for one SMTP line (quoted-printable).
BODY = "Déployé: v2.3 is live.\n.hidden dot line\r" + "x" * 1200 + "\nlast line without an end"


@pytest.fixture
def smtp(settings):
    with SmtpReceiver() as receiver:
        settings.EMAIL_BACKEND = "django.core.mail.backends.smtp.EmailBackend"
        settings.EMAIL_HOST, settings.EMAIL_PORT = "127.0.0.1", receiver.port
        yield receiver


def recipients_of(message) -> list[str]:
    """As a receiver reads them: the To and Cc headers."""
    return [
        address.addr_spec
        for name in ("To", "Cc")
        for header in message.get_all(name, [])
        for address in header.addresses
    ]


def verify(message, **changes):
    target = proof.mail_url(recipients_of(message))
    request = {
        "method": "SMTP",
        "url": target,
        "audience": target,
        "body": message.get_body(("plain",)).get_content(),
        "idempotency_key": message["Idempotency-Key"],
        "jwks": signing.jwks(),
        **changes,
    }
    return proof.verify(message["Approval-Proof"], **request)


def test_a_sent_message_carries_a_proof_the_receiver_verifies(people, smtp):
    plan = {
        "name": "Tell the team",
        "submission_key": "mail-proof",
        "steps": [
            {
                "key": "mail",
                "action": "email.send",
                "args": {
                    "to": ["ops@example.com", "Dev@Example.com"],
                    "cc": "audit@example.org",
                    "subject": "Deployed",
                    "body": BODY,
                },
            }
        ],
    }
    workflow = plans.submit(people["agent"], plan).workflow
    decide.approve(workflow, by=people["reviewer"])
    run_until(workflow.pk, "COMPLETE")
    [received] = smtp.messages
    message = received.message
    step = workflow.steps.get()
    attempt = step.attempts.get()
    claims = verify(message)
    assert claims["htm"] == "SMTP"
    assert claims["htu"] == claims["aud"] == "mailto:Dev@example.com,audit@example.org,ops@example.com"
    assert message["Idempotency-Key"] == claims["op"] == step.operation_key
    assert (claims["wf"], claims["step"], claims["action"]) == (str(workflow.pk), "mail", "email.send")
    assert claims["approvers"] == attempt.proof_approvers and claims["jti"] == attempt.proof_jti
    assert claims["exp"] - claims["iat"] == 86_400
    # The body the proof covers is the text as it arrived, lines ended by CRLF.
    text = message.get_body(("plain",)).get_content()
    assert text == BODY.replace("\r", "\n").replace("\n", "\r\n") + "\r\n"
    assert claims["body_sha256"] == proof.body_sha256(text.encode("utf-8"))
    # The envelope goes to the same people, and no header line passes SMTP's limit.
    assert sorted(received.recipients) == ["Dev@Example.com", "audit@example.org", "ops@example.com"]
    assert max(len(line) for line in received.lines) <= 998
    assert len(message["Approval-Proof"]) > 998  # it needed folding


def test_the_verifier_refuses_a_message_altered_or_sent_on(people, smtp, settings):
    context = PerformContext(
        workflow_id="w",
        revision=1,
        plan_hash="h",
        step="mail",
        action="email.send",
        operation_key="op-m",
        approvers=[],
        policy_version=1,
        args_sha256="x",
    )
    with performing(context):
        EmailSend().perform({"to": "ops@example.com", "subject": "s", "body": "Restart at 10:00"}, "op-m")
    [received] = smtp.messages
    message = received.message
    assert verify(message)["op"] == "op-m"
    for changes, says in [
        ({"body": "Restart at 11:00\r\n"}, "body"),
        ({"url": "mailto:ops@example.com,else@example.com"}, "htu"),
        ({"audience": "mailto:else@example.com"}, "aud"),
        ({"idempotency_key": "op-other"}, "Idempotency-Key"),
        ({"method": "POST"}, "htm"),
    ]:
        with pytest.raises(proof.InvalidProof, match=says):
            verify(message, **changes)
    # A mailbox that stores lines ended by LF alone still verifies.
    assert verify(message, body="Restart at 10:00\n")["op"] == "op-m"


def test_the_mail_proof_lifetime_is_its_own_setting(smtp, settings):
    settings.APPROVAL_PROOF_MAIL_TTL_SECONDS = 600
    context = PerformContext(
        workflow_id="w",
        revision=1,
        plan_hash="h",
        step="mail",
        action="email.send",
        operation_key="op-t",
        approvers=[],
        policy_version=1,
        args_sha256="x",
    )
    with performing(context):
        EmailSend().perform({"to": "ops@example.com", "subject": "s", "body": "b"}, "op-t")
    claims = verify(smtp.messages[0].message)
    assert claims["exp"] - claims["iat"] == 600 != settings.APPROVAL_PROOF_TTL_SECONDS


def test_mail_sent_outside_an_effect_carries_its_key_and_no_proof(smtp):
    EmailSend().perform({"to": "ops@example.com", "subject": "s", "body": "b"}, "op-x")
    message = smtp.messages[0].message
    assert message["Idempotency-Key"] == "op-x" and message["Approval-Proof"] is None
