"""What people and agents submit is never rewritten: ordinary prose is
stored and sent as written, and a credential in any free-text field is
refused, changing nothing (docs/explanation/trust-core.md#refuse-never-rewrite)."""

from datetime import timedelta

import pytest
from django.db import connection
from django.utils import timezone

from tests.support import deciding as decide
from tests.support.database import every_row_as_text
from tests.support.plans import ticket_plan
from tests.support.resolving import MAIL
from tests.support.running import run_until
from tests.support.secret_policy import desk_policy
from tests.support.seeing import Client, previews_taken
from workflows import actions
from workflows.audit import redaction
from workflows.engine import execution, policy, recovery
from workflows.models import DeadLetter, Step, Workflow
from workflows.operations import compensation, plans

pytestmark = pytest.mark.usefixtures("fresh_secret_registry")

# Ordinary prose an agent or a person writes about credentials without holding
# one: every sentence must be stored and sent exactly as written.
CORPUS = [
    "Tried basic troubleshooting; the token expiration is 5 min",
    "Basic connectivity checks passed on all three floors.",
    "The token expired again after the laptop went to sleep.",
    "Customer says the password reset email never arrives.",
    "Please rotate the API key before the end of the quarter.",
    "Bearer of bad news: the backup job failed overnight.",
    "The secret santa list is in the shared drive.",
    "Password: see the vault entry for the printer admin account.",
    "Token: expired, user must sign in again.",
    "Secret: keep the server room door closed.",
    "Our basic plan includes 5 seats and 2 projects.",
    "Session timeout is 30 minutes for the admin console.",
    "The private key ceremony is scheduled for Tuesday at 10:00.",
    "Authorization failed for user jsmith on the VPN gateway.",
    "The auth service restarted at 03:14 UTC.",
    "We compared sk-learn-pipelines-for-tabular-data to the new model.",
    "Renew the AKIA key rotation policy document.",
    "The github token scopes need repo and workflow.",
    "Slack tokens are managed by the IT team, ask in #it-help.",
    "Bearer tokens must be sent over TLS only.",
    "Basic auth is disabled on the legacy intranet.",
    "token 42 was assigned to the second queue",
    "The password policy now requires 14 characters.",
    "Please change your password: it is older than 90 days.",
    "Secret management moved to the new vault cluster.",
    "The API keys page shows three keys, two are unused.",
    "Basic PostgreSQL maintenance: vacuum and analyze weekly.",
    "Token refresh takes about 200 ms under load.",
    "The bearer was asked to sign the delivery slip.",
    "Printer on floor 3 asks for a password when scanning to email.",
    "Reset the token counter to 0 after each billing cycle.",
    "apikey rotation is tracked in ticket 4521.",
    "The word 'secret' appears in the contract three times.",
    "Tokens per minute limit: 90000 for the summariser.",
    "Set the session cookie to SameSite=Lax on the portal.",
    "Basic income experiment report is due Friday.",
    "Ask Bob about the password manager licence renewal.",
    "The token ring network in building B was finally retired.",
    "Secret sauce recipe stays with the kitchen, not IT.",
    "He entered the wrong password three times and got locked out.",
    "BASIC was the first language the intern learned.",
    "Our API key budget is 12 keys per team.",
    "The authorization header is missing on requests from the mobile app.",
    "Token-based login works; SAML login does not.",
    "Passwords are hashed with Argon2id since version 3.2.",
    "Use a secret-free config for the demo environment.",
    "The keynote covered basic security hygiene for 25 minutes.",
    "Agents must never put a token in a ticket body.",
    "The basic-tier customers get email support only.",
    "Token budget: 4k for the prompt, 1k for the answer.",
    "The secret: 3 retries, then escalate to tier 2.",
    "Password: Winter is coming, said the reset hint.",
    "Grant the service account basic read access to bucket logs-2024.",
    "Token 2FA devices arrive next week for the finance team.",
    "Use Basic DeviceManagement profile for kiosks.",
    "MFA secret rotation happens every 90 days per ISO27001.",
    "Key: the red one opens the server rack.",
    "Le mot de passe a expiré, l'utilisateur doit le réinitialiser.",
    "Das Token läuft nach 5 Minuten ab; Basic-Zugang bleibt gesperrt.",
    "Basic 🔑 rotation done ✅ — token handed back to security.",
]

# One positive case per pattern (and per secret-named key), with the path the
# refusal must name.
CREDENTIALS = [
    ("steps.0.args.body", {"body": "call with Authorization: Bearer 4f9a8b7c6d5e4f3a2b1c"}),
    ("steps.0.args.body", {"body": "Basic dXNlcjpwYXNzd29yZA=="}),
    ("steps.0.args.body", {"body": "Authorization: token ghx9Kq2LmZ8vTq4Wn7Rt"}),
    ("steps.0.args.body", {"body": "Basic dXNlcjpwYXNz"}),
    ("steps.0.args.body", {"body": "key sk-proj-4f9a8b7c6d5e4f3a2b1c0d"}),
    ("steps.0.args.body", {"body": "AKIAIOSFODNN7EXAMPLE is the deploy key"}),
    ("steps.0.args.body", {"body": "ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8"}),
    ("steps.0.args.body", {"body": "xoxb-1234567890-abcdefghij"}),
    ("steps.0.args.body", {"body": "-----BEGIN RSA PRIVATE KEY-----\nMIIEowIBAAKCAQEA\n-----END RSA PRIVATE KEY-----"}),
    ("steps.0.args.body", {"body": "https://api.example.com/export?password=hunter22"}),
    ("steps.0.args.body", {"body": "the admin password: hunter2"}),
    ("steps.0.args.body", {"body": "api_key = 7f3c9e1a2b"}),
    ("steps.0.args.password", {"password": "correct horse battery staple"}),
    ("steps.0.args.headers.Authorization", {"headers": {"Authorization": "anything at all"}}),
    ("steps.0.args.items.1.api_key", {"items": [{"name": "a"}, {"api_key": "plain words"}]}),
    ("steps.0.args.client_secret.value", {"client_secret": {"value": "nested too"}}),
    ("steps.0.compensation.args.note", "compensation"),
]
PLANTED = "see Bearer 9f8e7d6c5b4a39281706abcd"


def leaves(value) -> list[str]:
    if isinstance(value, dict):
        return [text for item in value.values() for text in leaves(item)]
    if isinstance(value, list):
        return [text for item in value for text in leaves(item)]
    return [value] if isinstance(value, str) and len(value) > 8 else []


def project_rows() -> str:
    """The project's own tables, to show that a refusal changed nothing (but
    the tokens' last use, which any call records)."""
    chunks = []
    tables = [t for t in connection.introspection.table_names() if t.startswith("workflows_") and "token" not in t]
    with connection.cursor() as cursor:
        for table in sorted(tables):
            cursor.execute(f'SELECT * FROM "{table}" ORDER BY 1')
            chunks.append(f"{table}: {cursor.fetchall()!r}")
    return "\n".join(chunks)


# --- (a) arguments are never rewritten ------------------------------------------


def test_ordinary_prose_is_stored_and_sent_exactly_as_submitted(api, people, desk):
    assert len(CORPUS) >= 50
    for part, sentences in enumerate((CORPUS[:30], CORPUS[30:])):
        body = {
            "name": "prose",
            "submission_key": f"prose-{part}",
            "steps": [
                {"key": f"s{n}", "action": "ticket.create", "args": {"title": f"prose {part}.{n}", "body": sentence}}
                for n, sentence in enumerate(sentences)
            ]
            + [{"key": "limits", "action": "noop", "args": {"max_tokens": 100, "password_min_length": 14}}],
        }
        answer = api["agent"].post("/workflows", body)
        assert answer.status_code == 201, answer.json()
        workflow = Workflow.objects.get(pk=answer.json()["id"])
        assert [step.args for step in workflow.steps.order_by("position")] == [s["args"] for s in body["steps"]]
        decide.approve(workflow, by=people["reviewer"])
        run_until(workflow.pk, "COMPLETE")
    received = {ticket["title"]: ticket["body"] for ticket in desk.tickets()}
    sent = {
        f"prose {part}.{n}": sentence
        for part, chunk in enumerate((CORPUS[:30], CORPUS[30:]))
        for n, sentence in enumerate(chunk)
    }
    assert received == sent
    for sentence in CORPUS:
        assert redaction.redact_text(sentence) == sentence


def test_the_plan_hash_covers_the_args_as_submitted(people):
    """Still SHA-256 of the canonical JSON of [{key, action, args,
    compensation}], compensation None when absent, so stored hashes stay
    valid: only the rewriting of args went."""
    from workflows.db import canonical_json, sha256_hex

    body = ticket_plan("hash")
    body["steps"][0]["args"]["body"] = CORPUS[0]
    workflow = plans.submit(people["agent"], body).workflow
    expected = [
        {"key": s["key"], "action": s["action"], "args": s["args"], "compensation": None} for s in body["steps"]
    ]
    assert workflow.plan_hash == sha256_hex(canonical_json(expected))


@pytest.mark.parametrize(("path", "args"), CREDENTIALS)
def test_each_credential_pattern_is_refused_with_its_path(api, path, args):
    step = {"key": "open", "action": "noop", "args": args}
    if args == "compensation":
        step = {
            "key": "open",
            "action": "noop",
            "args": {},
            "compensation": {"action": "noop", "args": {"note": "Bearer 4f9a8b7c6d5e4f3a2b1c"}},
        }
    answer = api["agent"].post("/workflows", {"name": "n", "submission_key": "k", "steps": [step]})
    assert answer.status_code == 400
    error = answer.json()["error"]
    assert error["code"] == "invalid"
    assert list(error["fields"]) == [path]
    assert '{"$secret": "NAME"}' in error["fields"][path]
    assert not Workflow.objects.exists()
    rows = every_row_as_text()
    assert [text for text in leaves(step) if text in rows] == []


def test_numbers_and_references_under_secret_named_keys_are_not_secrets(api, settings, desk):
    settings.SECRETS_POLICY = desk_policy(desk, "noop")
    answer = api["agent"].post(
        "/workflows",
        {
            "name": "n",
            "submission_key": "k",
            "steps": [
                {
                    "key": "a",
                    "action": "noop",
                    "args": {"max_tokens": 100, "api_key": {"$secret": "DESK_TOKEN"}, "password": "", "token_ok": True},
                }
            ],
        },
    )
    assert answer.status_code == 201, answer.json()


# --- (c) every free-text field refuses a credential -------------------------------------


@pytest.fixture
def scene(people, desk, settings, tmp_path):
    """A plan awaiting review, a failed workflow with a dead letter and a
    completed step, a compensation awaiting a decision, an in-doubt step."""
    settings.EMAIL_BACKEND = "django.core.mail.backends.filebased.EmailBackend"
    settings.EMAIL_FILE_PATH = str(tmp_path)
    failing = [
        {"key": "open", "action": "ticket.create", "args": {"title": "t", "body": "b"}},
        {
            "key": "fail",
            "action": "ticket.comment",
            "args": {"ticket_id": {"$from": "open.result.missing"}, "body": "x"},
        },
    ]
    planned = plans.submit(people["agent"], ticket_plan("planned")).workflow
    previews_taken(planned.pk)  # as a worker does after submission: a refused decision then changes nothing
    failed = []
    for key in ("failed-a", "failed-b"):
        workflow = plans.submit(people["agent"], {"name": key, "submission_key": key, "steps": failing}).workflow
        decide.approve(workflow, by=people["reviewer"])
        run_until(workflow.pk, "FAILED")
        failed.append(workflow)
    comp = compensation.request(failed[1], by=people["operator"], reason="incident cancelled")
    mail = plans.submit(people["agent"], MAIL).workflow
    decide.approve(mail, by=people["reviewer"])
    step = execution.claim(mail.pk)
    execution._request_attempt(step, step.fence)
    recovery.recover_expired_leases(now=timezone.now() + timedelta(hours=1))
    execution.run_workflow(mail.pk)
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"
    policy.policies_for(set(actions.names()))  # pages create missing policy rows: not a change a refusal made
    return {
        "planned": planned,
        "failed": failed[0],
        "dead_letter": DeadLetter.objects.get(workflow=failed[0]),
        "compensation": comp,
        "in_doubt": mail,
    }


def _api_cases(scene):
    w, dl, comp = scene["planned"].pk, scene["dead_letter"].pk, scene["compensation"].pk
    plan = ticket_plan("fresh")
    return [
        ("agent", "/workflows", {**plan, "name": PLANTED}, "name"),
        ("agent", "/workflows", {**plan, "submission_key": PLANTED}, "submission_key"),
        (
            "agent",
            "/workflows",
            {**plan, "steps": [{**plan["steps"][0], "key": "sk-proj-4f9a8b7c6d5e4f3a2b1c0d"}]},
            "steps.0.key",
        ),
        ("reviewer", f"/workflows/{w}/approve", {"comment": PLANTED}, "comment"),
        ("reviewer", f"/workflows/{w}/reject", {"comment": PLANTED}, "comment"),
        ("operator", f"/dead-letters/{dl}/replay", {"reason": PLANTED}, "reason"),
        ("operator", f"/dead-letters/{dl}/discard", {"reason": PLANTED}, "reason"),
        ("operator", f"/workflows/{scene['failed'].pk}/compensations", {"reason": PLANTED}, "reason"),
        ("reviewer", f"/compensations/{comp}/authorize", {"reason": PLANTED}, "reason"),
        ("reviewer", f"/compensations/{comp}/decline", {"reason": PLANTED}, "reason"),
    ]


def test_every_api_free_text_field_refuses_a_credential(scene, api):
    before = project_rows()
    for persona, path, body, field in _api_cases(scene):
        answer = api[persona].post(path, body)
        assert answer.status_code == 400, (path, answer.content)
        error = answer.json()["error"]
        assert error["code"] == "invalid" and field in error["fields"], (path, error)
        assert "9f8e7d6c5b4a" not in answer.content.decode() and "4f9a8b7c6d5e" not in answer.content.decode()
    assert project_rows() == before  # nothing changed
    rows = every_row_as_text()
    assert "9f8e7d6c5b4a" not in rows and "4f9a8b7c6d5e" not in rows


def _console_cases(scene):
    w, dl, comp = scene["planned"].pk, scene["dead_letter"].pk, scene["compensation"].pk
    resolve = f"/workflows/{scene['in_doubt'].pk}/steps/mail/resolve"
    return [
        ("reviewer", f"/workflows/{w}/approve", {"comment": PLANTED}),
        ("reviewer", f"/workflows/{w}/reject", {"comment": PLANTED}),
        ("operator", f"/dead-letters/{dl}/replay", {"reason": PLANTED}),
        ("operator", f"/dead-letters/{dl}/discard", {"reason": PLANTED}),
        ("operator", "/dead-letters/bulk/replay", {"ids": [str(dl)], "reason": PLANTED}),
        ("operator", f"/workflows/{scene['failed'].pk}/compensate", {"steps": ["open"], "reason": PLANTED}),
        ("reviewer", f"/compensations/{comp}/authorize", {"reason": PLANTED}),
        ("reviewer", f"/compensations/{comp}/decline", {"reason": PLANTED}),
        ("operator", resolve, {"decision": "happened", "reason": PLANTED, "external_ref": "mail:1"}),
        ("operator", resolve, {"decision": "happened", "reason": "seen in the outbox", "external_ref": PLANTED}),
    ]


def test_every_console_form_refuses_a_credential_with_a_visible_error(scene, people):
    before = project_rows()
    for persona, path, data in _console_cases(scene):
        browser = Client()
        browser.force_login(people[persona])
        page = browser.post(path, data, follow=True)
        assert page.status_code in (200, 400), (path, page.status_code)
        html = page.content.decode()
        assert "looks like it holds a credential" in html, path
        assert "9f8e7d6c5b4a" not in html, path
    assert project_rows() == before  # nothing changed
    assert "9f8e7d6c5b4a" not in every_row_as_text()


def test_resolution_refuses_credentials_in_the_result_it_records(scene, people):
    from workflows.operations import resolution

    step = Step.objects.get(workflow=scene["in_doubt"], key="mail")
    with pytest.raises(redaction.CredentialRefused) as refused:
        resolution.resolve(
            step,
            by=people["operator"],
            decision="happened",
            reason="seen",
            external_ref="mail:1",
            result={"receipt": {"api_key": "k-123"}},
        )
    assert list(refused.value.fields) == ["result.receipt.api_key"]
    assert Step.objects.get(pk=step.pk).status == "IN_DOUBT"
