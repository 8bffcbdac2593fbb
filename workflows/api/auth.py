"""The API's callers: agents and people, each with a bearer token."""

from django.http import HttpRequest
from ninja.security import HttpBearer

from workflows.audit import identity
from workflows.operations import tokens


class BearerToken(HttpBearer):
    def authenticate(self, request: HttpRequest, token: str):
        user = tokens.authenticate(token)
        if user is not None:
            request.user = user
            # The agent's events name the token they came with: its public
            # prefix, as tokens.issue stores and shows it.
            identity.update(username=user.get_username(), token=token[:10], subject="", issuer="")
        return user
