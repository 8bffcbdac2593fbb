"""What durable execution costs on this machine, measured in one run
(`python manage.py bench`).

    a  raw ceiling: the database alone, looping two commits per step (insert
       the attempt, then update its outcome) from 1, 4 and 8 client threads
    b  durable steps per second: `noop` plans approved in one transaction and
       run by real `qcluster` processes (one cluster, then two) through the
       whole checkpoint protocol; first the protocol's queries and commits
       per step, counted in this process; then each burst's cost per step
       (commits, rows written, WAL, CPU of the clusters and the database)
    c  approval-to-first-effect latency: one-step plans approved one at a time
       while a cluster idles
    d  recovery: a worker SIGKILLed mid-step (failpoint `after_requested`)
       until the step is COMPLETE, once with the cluster respawning the
       worker, once with the whole cluster killed and a fresh one started
    e  server time and query count of the console's pages at a seeded scale
    f  RSS of every cluster process, sampled four times a second during b
    g  remote steps per second against the ticket desk, and the cost per
       remote step (`remote`)
    h  agents waiting at once on one web process for their decisions, and
       how soon each is answered after its decision (`waiters`)
    i  reconcile before replay, in bulk: 2,000 dead letters after a desk
       outage in which half of the effects landed, reconciled and the safe
       half replayed by jobs that a real cluster advances; each operation
       key on the desk exactly once (`bulk`)
    j  archive: `--archive-workflows` (100k) seeded finished workflows
       archived while a cluster runs live plans: time, peak memory, no lost
       or blocked work (`archiving`)
    k  lanes: how soon a reviewer's notice and a plan's previews are
       delivered under a backlog of `--lanes-steps` (10,000) due steps,
       against the same idle, p50/p95 and their ratio (`lanes`)
    l  analytics: `--analytics-decisions` (100k) review endings seeded in
       the analytics tables, `GET /api/v1/analytics/decisions` timed over
       HTTP as a ratio to a trivial authenticated GET (`analytics`)
    n  Slack clicks: signed clicks posted to /chat/slack/interactions/ on a
       gunicorn web process, each plan APPROVED by a real cluster's worker:
       click → APPROVED p50/p95 (`slack_clicks`)
    o  policies: a team's Cedar policy set of `--policy-sizes` (10, 100 and
       1,000) policies: evaluation µs per step p50/p99 in process, and the
       policies' share of submit → APPROVED through the API, beside the same
       path with no policy set (`policies`)
    p  (b)'s burst on one cluster with its plans approved by policy at
       submission (a team whose live Cedar set permits `noop` auto_approve)
       in place of the reviewer's approvals, beside (b)'s rate (`auto_burst`)
    q  the chaos soak, everything at once (`manage.py chaos --soak`), for
       `--soak DURATION` (30m for the documented figures); left out unless
       given: lost and duplicate effects, proofs, webhooks, audit, and the
       recovery median and max over its kills (`soak`)

Goals are reported, never asserted. Every process started here is stopped
in a `finally`; a part that fails is recorded under `errors` and the rest
still runs.

Bench (`parts`) runs the parts in turn; the raw ceiling (a) is measured
in `raw`, the RSS of (f) sampled in `memory`, queries and commits are
counted in `counting`, a burst's cost per step in `cost`; the options,
personas and goals are in `common`.
Ops tooling: it may import anything in workflows/, and only the
management commands import it.
"""
