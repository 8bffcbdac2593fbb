"""The ticket desk: a small *external* system the console talks to.

It runs as its own process (``python manage.py ticketdesk``) with its own
storage (a SQLite file), and deliberately uses nothing from Django: it stands
in for a third-party HTTP API, so it must not share the project's database,
ORM or settings.

HTTP API (all bodies JSON, errors as ``{"error": {"code", "message"}}``):

    POST   /tickets                  {"title", "body"} + optional Idempotency-Key
                                     201 new ticket, 200 same ticket for a repeated key
    GET    /tickets                  every ticket; ?idempotency_key=K filters by key
    GET    /tickets/{id}             one ticket or 404
    POST   /tickets/{id}/comments    {"body"} + optional Idempotency-Key (per ticket)
    POST   /tickets/{id}/close       200; closing a closed ticket is a no-op
    GET    /_ledger                  every request that changed something, in order; each entry's
                                     ``proof`` holds the approval proof's wf, approvers, kid and jti
                                     when the desk requires proofs (else null)
    GET    /_faults                  active faults
    POST   /_faults                  inject a fault (see ``faults.parse_fault``)
    DELETE /_faults                  clear all faults (DELETE /_faults/{id}: one)
    POST   /_reset                   wipe tickets, comments, ledger and faults
    GET    /_concurrency             {"in_flight": {kind: n}, "max_in_flight": {kind: n}} for the
                                     kinds POST /tickets, POST /tickets/{id}/comments,
                                     POST /tickets/{id}/close and GET /tickets
    DELETE /_concurrency             start the high-water marks again

With ``--require-approval-proof --jwks URL_OR_FILE --audience ORIGIN``
(``proofs``), a write to ``/tickets`` without a valid ``Approval-Proof``
for exactly that request is answered 403 ``approval_proof_invalid`` and
changes nothing (it takes no fault either).

Faults apply only to POST requests to ``/tickets`` paths.  Every such POST
first sleeps for the active ``latency`` faults.  Then the oldest active
count-limited "answering" fault (``error``, ``rate_limit``,
``commit_then_drop``) takes that request and loses one from its count, so
injecting ``error`` then ``commit_then_drop`` scripts "503, then a dropped
commit".  ``ignore_idempotency`` (until cleared) makes ``POST /tickets``
create a new ticket even for a repeated key.

Concurrency: a thread per connection, at most ``--threads`` (default 256)
requests served at once; a latency fault sleeps before the store is
touched, so 200 requests under a 300 ms fault take about 300 ms, not 60 s.

Storage: WAL mode, synchronous=FULL, one connection per request, and writes
serialised by a lock plus ``BEGIN IMMEDIATE``.  A change and its ledger row
commit in one transaction, so an answered 2xx is on disk before the answer is
sent.  Faults live in memory only.

The package: ``faults`` parses fault specs and keeps the active ones,
``store`` is the SQLite storage and the ticket/comment JSON, ``server`` the
HTTP handler and ``serve``; ``errors`` holds ``DeskError``, the one error
type answered to clients.
"""

from workflows.ticketdesk.server import serve

__all__ = ["serve"]
