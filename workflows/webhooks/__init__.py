"""Signed outbound webhooks (Standard Webhooks, docs/explanation/agents.md#webhooks).

`workflows.outbox` writes one row per (event, endpoint) in the transaction
of the change it reports; `delivery` is run by the workers and sends each row
at least once, signed with the keys of `keys`; `outbound` holds the address
rules every call towards a URL that a plan or an operator named goes through.
"""
