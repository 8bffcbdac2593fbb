from django.contrib import admin
from django.templatetags.static import static
from django.urls import include, path
from django.views.generic import RedirectView

from workflows.admin import view_on_site
from workflows.api import api

urlpatterns = [
    path("api/v1/", api.urls),
    # Before the admin's own, which answers a malformed UUID with a 500.
    path("admin/r/<path:content_type_id>/<path:object_id>/", view_on_site),
    path("admin/", admin.site.urls),
    path("", include("workflows.web.urls")),
    # Asked for by browsers and tools that do not read the pages' icon link.
    path("favicon.ico", RedirectView.as_view(permanent=True, get_redirect_url=lambda *a, **k: static("favicon.svg"))),
]
