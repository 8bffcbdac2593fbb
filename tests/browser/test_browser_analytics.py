"""The analytics page in the system Chromium at 390 and 1280 px
(docs/guides/analytics.md): its bars and tables fit the width, every bar
is drawn with a length that can be read, and axe-core finds no serious
accessibility violation. (The page is also among those every layout and
accessibility check visits: tests/browser/test_browser_layout.py and
test_browser_pages.py.)"""

from pathlib import Path

import pytest
from django.conf import settings

from tests.support.analytics import decided
from tests.support.personas import PASSWORD

pytestmark = [pytest.mark.browser, pytest.mark.django_db(transaction=True)]

AXE = Path(settings.BASE_DIR) / "node_modules" / "axe-core" / "axe.min.js"
LONG_ACTION = "reports.quarterly_compliance_export_to_the_regulator_and_the_board"
MEASURE = """() => ({
  scroll: document.documentElement.scrollWidth - window.innerWidth,
  meters: [...document.querySelectorAll("table.hbars meter")].map(m => m.getBoundingClientRect().width),
  rows: document.querySelectorAll("#by-action tbody tr").length,
})"""
SERIOUS = """async () => {
  const results = await axe.run(document, {resultTypes: ["violations"]});
  return results.violations.filter(v => v.impact === "serious" || v.impact === "critical").map(v => v.id);
}"""


@pytest.mark.parametrize("width", (390, 1280))
def test_the_analytics_page_reads_on_a_phone_and_a_desktop(browser, live_server, people, width):
    if not AXE.exists():
        pytest.skip(f"{AXE} is missing: `make setup-browser-checks` installs axe-core")
    decided(12, actions=("noop", LONG_ACTION))
    decided(3600 * 5, outcome="rejected", reviewer="user:2", actor="a-reviewer-with-a-very-long-account-name")
    decided(86400 * 3, outcome="expired")
    context = browser.new_context(viewport={"width": width, "height": 900}, base_url=live_server.url)
    try:
        page = context.new_page()
        page.goto("/login/")
        page.fill("#id_username", "auditor")
        page.fill("#id_password", PASSWORD)
        page.click("button[type=submit]")
        page.wait_for_url(f"{live_server.url}/")
        page.get_by_role("link", name="Analytics").click()
        page.wait_for_url(f"{live_server.url}/analytics/")
        page.get_by_role("button", name="Show").click()
        page.wait_for_load_state("networkidle")
        found = page.evaluate(MEASURE)
        assert found["scroll"] <= 0, f"the page scrolls sideways by {found['scroll']} px at {width} px"
        assert found["meters"] and min(found["meters"]) >= 40, found["meters"]
        assert found["rows"] == 2
        assert page.get_by_test_id("p50").inner_text() == "2 h 30 min"
        page.evaluate(AXE.read_text())
        assert page.evaluate(SERIOUS) == []
    finally:
        context.close()
