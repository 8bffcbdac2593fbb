"""`make screenshots`: the pictures of the documentation (docs/img/*.png),
taken from the real console.

Starts the demo (`manage.py rundemo`: web, worker cluster and ticket desk)
on a SQLite database of its own under var/screenshots/ and on free ports,
has the demo's agent submit a plan that will fail at the desk, approves it
as a reviewer in the system Chromium, waits for its dead letter, and takes
the reviewer's inbox, a plan page, the dead letters and the audit trail at
1280 px wide; and, beside the plan, its message in Slack, as the Slack
stand-in (`manage.py slack_standin`) the demo posts to renders it. Run as `python -m workflows.ops.screenshots` from the
project's directory; it needs no settings of its own (DEBUG=1 is set for
the demo).
"""

from __future__ import annotations

import json
import os
import shutil
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from pathlib import Path

from playwright.sync_api import Browser, Page, expect, sync_playwright

BASE_DIR = Path(__file__).resolve().parents[2]
WORKDIR = BASE_DIR / "var" / "screenshots"
IMAGES = BASE_DIR / "docs" / "img"
CHROMIUM = "/usr/bin/chromium"
PASSWORD = "durable-demo"  # the demo's, workflows.ops.demo.PASSWORD
VIEWPORT = {"width": 1280, "height": 860}
DEMO_PLAN = "Open an incident ticket and note the follow-up"  # one of workflows.ops.demo.SAMPLES
# A ticket the desk never opened: the close is refused (404), and the step
# becomes a dead letter an operator must look at.
FAILING_PLAN = {
    "name": "Close the printer ticket",
    "submission_key": "screenshots-dead-letter",
    "context": {"why": "fixed on site"},
    "steps": [{"key": "close", "action": "ticket.close", "args": {"ticket_id": 424242}}],
}


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def manage(*args: str) -> list[str]:
    return [sys.executable, str(BASE_DIR / "manage.py"), *args]


def wait_for(url: str, timeout: float = 90.0) -> None:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            with urllib.request.urlopen(url, timeout=1):  # noqa: S310 (our own loopback URL)
                return
        except OSError:
            time.sleep(0.3)
    raise RuntimeError(f"{url} did not answer within {timeout:.0f} s; see {WORKDIR / 'demo.log'}")


def submit(web: str, token: str, plan: dict) -> dict:
    request = urllib.request.Request(
        f"{web}/api/v1/workflows",
        data=json.dumps(plan).encode(),
        headers={"Authorization": f"Bearer {token}", "Content-Type": "application/json"},
    )
    with urllib.request.urlopen(request, timeout=10) as answer:  # noqa: S310 (our own loopback URL)
        return json.load(answer)


def signed_in(browser: Browser, web: str, username: str) -> Page:
    page = browser.new_context(viewport=VIEWPORT).new_page()
    page.goto(f"{web}/login/")
    page.get_by_label("Username").fill(username)
    page.get_by_label("Password").fill(PASSWORD)
    page.get_by_role("button", name="Log in").click()
    expect(page).not_to_have_url(f"{web}/login/")
    return page


def shoot(page: Page, name: str) -> None:
    page.wait_for_load_state("networkidle")
    path = IMAGES / f"{name}.png"
    page.screenshot(path=path, animations="disabled")
    print(f"wrote {path.relative_to(BASE_DIR)}")


def reload_until(page: Page, url: str, text: str, timeout: float = 60.0) -> None:
    """The console's pages as a person sees them: reloaded until `text` shows."""
    deadline = time.monotonic() + timeout
    while True:
        page.goto(url)
        if page.get_by_text(text).count():
            return
        if time.monotonic() > deadline:
            raise RuntimeError(f"{url} never showed {text!r}")
        time.sleep(1)


SLACK_TOKEN = "xoxb-screenshots"
SLACK_CHANNEL = "C0DEMO"


def take(web: str, token: str, slack: str) -> None:
    failing = submit(web, token, FAILING_PLAN)
    with sync_playwright() as playwright:
        browser = playwright.chromium.launch(executable_path=CHROMIUM, headless=True, args=["--no-sandbox"])
        reviewer = signed_in(browser, web, "reviewer")
        reload_until(reviewer, f"{web}/", FAILING_PLAN["name"])
        shoot(reviewer, "inbox")

        reviewer.get_by_role("link", name=DEMO_PLAN, exact=True).click()
        # The previews are taken by a worker; the page looks again until they are in.
        expect(reviewer.get_by_test_id("preview-pending")).to_have_count(0, timeout=30_000)
        shoot(reviewer, "plan")

        channel = browser.new_page(viewport={"width": 760, "height": 860})
        reload_until(channel, f"{slack}/_standin/channel/{SLACK_CHANNEL}", DEMO_PLAN)
        shoot(channel, "slack-message")

        reviewer.goto(f"{web}/workflows/{failing['id']}/")
        expect(reviewer.get_by_test_id("preview-pending")).to_have_count(0, timeout=30_000)
        reviewer.get_by_label("Comment").fill("The printer works again.")
        reviewer.get_by_role("button", name="Approve").click()
        expect(reviewer.get_by_test_id("workflow-status")).not_to_have_text("PLANNED")

        operator = signed_in(browser, web, "operator")
        reload_until(operator, f"{web}/dead-letters/", "ticket.close")
        shoot(operator, "dead-letters")

        auditor = signed_in(browser, web, "auditor")
        auditor.goto(f"{web}/audit/")
        shoot(auditor, "audit")
        browser.close()


def main() -> None:
    shutil.rmtree(WORKDIR, ignore_errors=True)
    WORKDIR.mkdir(parents=True)
    IMAGES.mkdir(parents=True, exist_ok=True)
    web_port, desk_port, slack_port = free_port(), free_port(), free_port()
    web, slack = f"http://127.0.0.1:{web_port}", f"http://127.0.0.1:{slack_port}"
    env = {
        **os.environ,
        "DEBUG": "1",
        "DATABASE_URL": f"sqlite:///{WORKDIR / 'db.sqlite3'}",
        "PYTHONUNBUFFERED": "1",
        "SLACK_BOT_TOKEN": SLACK_TOKEN,
        "SLACK_API_URL": f"{slack}/api/",
        "SLACK_CHANNELS": json.dumps({"default": SLACK_CHANNEL}),
    }
    with open(WORKDIR / "slack.log", "wb") as log:
        standin = subprocess.Popen(
            manage("slack_standin", "--port", str(slack_port), "--token", SLACK_TOKEN, "--channel", SLACK_CHANNEL),
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
        )
    with open(WORKDIR / "demo.log", "wb") as log:
        demo = subprocess.Popen(
            manage("rundemo", "--web", f"127.0.0.1:{web_port}", "--desk-port", str(desk_port)),
            cwd=BASE_DIR,
            env=env,
            stdout=log,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    try:
        wait_for(f"http://127.0.0.1:{desk_port}/tickets")
        token = subprocess.run(
            manage("issue_token", "agent"), cwd=BASE_DIR, env=env, check=True, capture_output=True, text=True
        ).stdout.strip()
        wait_for(f"{slack}/_standin/ready")
        take(web, token, slack)
    finally:
        standin.terminate()
        standin.wait(10)
        # rundemo stops its web, worker and desk on SIGINT, as on Ctrl-C.
        os.killpg(demo.pid, signal.SIGINT)
        try:
            demo.wait(30)
        except subprocess.TimeoutExpired:
            os.killpg(demo.pid, signal.SIGKILL)
            demo.wait()


if __name__ == "__main__":
    main()
