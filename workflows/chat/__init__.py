"""Approvals where people work: Slack messages kept current with the plans
they show (docs/guides/slack-admins.md).

`marks` sits beside the outbox, below the engine: the changes call it in
their transactions. `slack` renders and sends, in worker tasks only.
"""
