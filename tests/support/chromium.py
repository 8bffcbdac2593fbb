"""The system Chromium for the browser tests (a pytest plugin, loaded by
conftest): never a downloaded browser. Missing, it skips those tests, and
fails them under CI=true."""

import os
from pathlib import Path

import pytest
from django.conf import settings
from playwright.sync_api import sync_playwright

CHROMIUM = Path("/usr/bin/chromium")
CHROMIUM_ARGS = [
    "--no-sandbox",
    "--disable-gpu",
    "--disable-quic",
    "--no-first-run",
    "--disable-background-networking",
    "--disable-component-update",
    "--disable-sync",
]
SCREENSHOTS = Path(settings.BASE_DIR) / "test-artifacts" / "screenshots"


@pytest.fixture(scope="module")
def browser():
    """One system Chromium for the module; never a downloaded browser."""
    if not CHROMIUM.exists():
        reason = f"{CHROMIUM} is missing: the browser tests drive the system Chromium only"
        if os.environ.get("CI") == "true":
            pytest.fail(reason)
        pytest.skip(reason)
    SCREENSHOTS.mkdir(parents=True, exist_ok=True)
    with pytest.MonkeyPatch.context() as patch:
        # Playwright's sync API keeps an event loop running in this thread, which
        # makes Django refuse ORM calls here; the tests and fixtures are synchronous.
        patch.setenv("DJANGO_ALLOW_ASYNC_UNSAFE", "true")
        with sync_playwright() as playwright:
            chromium = playwright.chromium.launch(executable_path=str(CHROMIUM), headless=True, args=CHROMIUM_ARGS)
            yield chromium
            chromium.close()
