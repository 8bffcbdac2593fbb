"""The API's docs page (`/api/v1/docs`) loads Swagger UI from this site,
never from a CDN: django-ninja is not a listed app here
(settings.NINJA_DIR), which would otherwise send the page to one."""

import re

import pytest
from django.conf import settings
from django.contrib.staticfiles import finders
from django.core.management import call_command
from django.test import Client


def test_the_docs_page_loads_swagger_ui_from_this_site_and_names_the_schema(db):
    page = Client().get("/api/v1/docs")
    assert page.status_code == 200
    html = page.content.decode()
    assert '"url": "/api/v1/openapi.json"' in html
    assets = re.findall(r'(?:src|href)="([^"]+)"', html)
    assert {"/static/ninja/swagger-ui-bundle.js", "/static/ninja/swagger-ui.css"} <= set(assets)
    static = "/" + settings.STATIC_URL.lstrip("/")
    for asset in assets:
        assert asset.startswith(static), asset
        assert finders.find(asset.removeprefix(static)), f"{asset} is not among the static files"
    # No CSRF token on a page whose API takes bearer tokens only.
    assert 'data-csrf-token=""' in html


def test_collectstatic_gathers_swagger_ui_for_the_production_server(settings, tmp_path):
    """Production serves what collectstatic gathered (whitenoise)."""
    settings.STATIC_ROOT = tmp_path
    call_command("collectstatic", interactive=False, verbosity=0)
    assert (tmp_path / "ninja" / "swagger-ui-bundle.js").is_file()
    assert (tmp_path / "ninja" / "swagger-ui-init.js").is_file()


@pytest.mark.parametrize("path", ["/api/v1/docs", "/api/v1/openapi.json"])
@pytest.mark.parametrize("method", ["post", "put", "patch", "delete"])
def test_the_schema_and_its_page_refuse_a_write_method_as_the_operations_do(db, path, method):
    answer = getattr(Client(), method)(path, data="{}", content_type="application/json")
    assert answer.status_code == 405 and answer["Allow"] == "GET, HEAD"
    assert Client().head(path).status_code == 200
