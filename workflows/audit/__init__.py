"""The audit trail and what keeps secrets out of it.

`journal` appends hash-chained events inside the caller's transaction and
verifies the chain; `keys` holds the audit keys (HMAC links, approval
seals), `signing` the Ed25519 key set, `checkpoints` the signed heads;
`redaction` and `secrets` decide what may be stored or shown.

May import the models only. `keys`, `secrets` and `redaction` import no
models at all: settings load them before Django is set up, so this file
stays empty of imports.
"""
