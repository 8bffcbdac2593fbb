"""The JSON API as one persona, with a real bearer token: in-process
through Django's test client, or over real HTTP to a live server."""

import requests
from django.test import Client

from tests.support import seeing
from workflows.operations import tokens


class ApiClient:
    """Calls the JSON API in-process as one persona, with a real bearer token."""

    def __init__(self, user):
        self.user = user
        self.client = Client(HTTP_AUTHORIZATION=f"Bearer {tokens.issue(user)}")

    def get(self, path, **params):
        return self.client.get(f"/api/v1{path}", params)

    def post(self, path, body=None):
        body = seeing.json_body(path, body if body is not None else {})
        return self.client.post(f"/api/v1{path}", body, content_type="application/json")

    def patch(self, path, body=None):
        return self.client.patch(f"/api/v1{path}", body if body is not None else {}, content_type="application/json")

    def put(self, path, body=None):
        return self.client.put(f"/api/v1{path}", body if body is not None else {}, content_type="application/json")

    def delete(self, path, body=None):
        if body is None:
            return self.client.delete(f"/api/v1{path}")
        return self.client.delete(f"/api/v1{path}", body, content_type="application/json")


class HttpApi:
    """Calls the JSON API over real HTTP as one persona."""

    def __init__(self, base_url, user):
        self.base = f"{base_url}/api/v1"
        self.session = requests.Session()
        self.session.headers["Authorization"] = f"Bearer {tokens.issue(user)}"

    def get(self, path, **params):
        return self.session.get(f"{self.base}{path}", params=params, timeout=10)

    def post(self, path, body=None):
        body = seeing.json_body(path, body if body is not None else {})
        return self.session.post(f"{self.base}{path}", json=body, timeout=10)
