"""The personas of the product, each with the groups of its role (the
`people` fixture makes their accounts), and the password they all sign in with."""

from workflows import roles

PERSONAS = {
    "reviewer": [roles.REVIEWERS],
    "reviewer2": [roles.REVIEWERS],
    "operator": [roles.OPERATORS],
    "auditor": [roles.AUDITORS],
    "agent": [],
    "admin": [roles.REVIEWERS, roles.OPERATORS, roles.AUDITORS],
}
PASSWORD = "correct horse battery staple"
