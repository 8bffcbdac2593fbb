"""Approval policies as Cedar code (docs/explanation/policies.md#policies).

`schema` is the published Cedar schema policies are validated against,
`text` checks a proposed policy set (parse, validate, `@id`s, limits) and
`evaluation` decides, for each step of a plan, whether its submission is
forbidden and whether it is approved by policy or goes to a human. Storing,
proposing and authorizing versions of a team's set is
`workflows.operations.policy_sets`.
"""
