"""People acting at the same moment on real processes: each persona's own
HTTP session to a web process, a console session signed in through the
login form, and `at_once`, which releases several requests together.

Every decision these clients send names what that person's own read
showed (`Person.read`), never what the test process reads: a race between
a read and a click is what the tests built on them are about.
"""

from __future__ import annotations

import html
import re
import threading
import time

import requests
from django.contrib.auth.hashers import PBKDF2PasswordHasher

from tests.support.personas import PASSWORD
from workflows.operations import tokens

TIMEOUT = 30


class Person:
    """One persona calling the JSON API over its own HTTP connection."""

    def __init__(self, base_url: str, user, token: str | None = None):
        self.name = user.get_username()
        self.user = user
        self.base = f"{base_url}/api/v1"
        self.token = token or tokens.issue(user)
        self.http = requests.Session()
        self.http.headers["Authorization"] = f"Bearer {self.token}"

    def again(self) -> Person:
        """The same account on a second connection (a double click)."""
        return Person(self.base.removesuffix("/api/v1"), self.user, self.token)

    def read(self, workflow_id) -> dict:
        """What a decision on the plan names, as this person just read it."""
        got = self.http.get(f"{self.base}/workflows/{workflow_id}", timeout=TIMEOUT)
        assert got.status_code == 200, got.content
        plan = got.json()
        return {
            "revision": plan["revision"],
            "plan_hash": plan["plan_hash"],
            "preview_digests": {
                step["key"]: step["preview"]["digest"] for step in plan["steps"] if step["preview"]["state"] == "READY"
            },
        }

    def approve(self, workflow_id, seen: dict, comment: str = "") -> requests.Response:
        return self.post(f"/workflows/{workflow_id}/approve", {**seen, "comment": comment})

    def reject(self, workflow_id, seen: dict, comment: str = "") -> requests.Response:
        return self.post(
            f"/workflows/{workflow_id}/reject",
            {"revision": seen["revision"], "plan_hash": seen["plan_hash"], "comment": comment},
        )

    def post(self, path: str, body: dict) -> requests.Response:
        return self.http.post(f"{self.base}{path}", json=body, timeout=TIMEOUT)

    def get(self, path: str, **params) -> requests.Response:
        return self.http.get(f"{self.base}{path}", params=params, timeout=TIMEOUT)


def web_password(user) -> None:
    """Give `user` a password the web process can check: the tests hash
    with MD5 for speed, which a production process does not accept."""
    hasher = PBKDF2PasswordHasher()
    user.password = hasher.encode(PASSWORD, hasher.salt())
    user.save(update_fields=["password"])


CSRF = re.compile(r'name="csrfmiddlewaretoken" value="([^"]+)"')


class Console:
    """A person's console in a browser without JavaScript: signed in
    through the login form, posting the forms of the pages it loaded."""

    def __init__(self, base_url: str, user):
        self.base = base_url
        self.http = requests.Session()
        login = self.http.get(f"{base_url}/login/", timeout=TIMEOUT)
        signed_in = self.http.post(
            f"{base_url}/login/",
            allow_redirects=False,
            timeout=TIMEOUT,
            data={
                "username": user.get_username(),
                "password": PASSWORD,
                "csrfmiddlewaretoken": _field(CSRF, login.text),
            },
        )
        assert signed_in.status_code == 302, signed_in.text[-2000:]

    def page(self, path: str) -> str:
        got = self.http.get(f"{self.base}{path}", timeout=TIMEOUT)
        assert got.status_code == 200, got.text[-2000:]
        return got.text

    def submit(self, page: str, path: str, **fields) -> requests.Response:
        """Post `page`'s decision form to `path` as its button does (the
        hidden fields it carried, and `fields`), following the redirect."""
        return self.http.post(f"{self.base}{path}", timeout=TIMEOUT, data={**decision_form(page), **fields})


def decision_form(page: str) -> dict | None:
    """The hidden fields of the page's decision form (its CSRF token
    among them), or None without one."""
    found = re.search(r'<form id="decision-form".*?</form>', page, re.DOTALL)
    if found is None:
        return None
    return {
        name: html.unescape(value)
        for name, value in re.findall(r'<input type="hidden" name="(\w+)" value="([^"]*)"', found[0])
    }


def status_shown(page: str) -> str:
    return _field(re.compile(r'data-testid="workflow-status">(\w+)<'), page)


def _field(pattern: re.Pattern, text: str) -> str:
    found = pattern.search(text)
    assert found, f"not on the page: {pattern.pattern}"
    return found[1]


def at_once(*calls, delays=None) -> list:
    """Run each call on a thread of its own, released together by one
    barrier (call i after `delays[i]` seconds more); each call's
    `(answer, when it came)`, in order. An exception in a call is raised."""
    delays = delays or [0.0] * len(calls)
    barrier = threading.Barrier(len(calls))
    answers: list = [None] * len(calls)
    errors: list = []

    def run(index, call):
        try:
            barrier.wait(TIMEOUT)
            if delays[index]:
                time.sleep(delays[index])
            answer = call()
            answers[index] = (answer, time.monotonic())
        except BaseException as exc:  # noqa: BLE001 - raised again in the test's thread
            errors.append(exc)

    threads = [threading.Thread(target=run, args=(index, call), daemon=True) for index, call in enumerate(calls)]
    for thread in threads:
        thread.start()
    for thread in threads:
        thread.join(TIMEOUT * 2)
    if errors:
        raise errors[0]
    assert all(answer is not None for answer in answers), "a call never answered"
    return answers
