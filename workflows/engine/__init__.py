"""The durable engine: everything that moves a step without a person.

The one place a status changes (`transitions`, over the table in
`workflows.states`), claims and leases (`leases`), the checkpoint protocol
(`execution`) and what an outcome means (`outcomes`, `parking`,
`compensating`), recovery and reconciliation (`recovery`), backoff
(`retry`), `$from` references (`references`), the policy recheck and plan
binding (`policy`, `binding`), deadlines (`expiry`), failpoints, and the
worker loop (`worker`). Wake-ups go through the task queue (`workflows.queue`).

May import actions, audit and the models; never operations, web or ops.
"""
