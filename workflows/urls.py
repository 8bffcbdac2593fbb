from django.contrib.auth import views as auth_views
from django.urls import path

from workflows import views

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("login/", auth_views.LoginView.as_view(template_name="workflows/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("workflows/", views.workflow_list, name="workflow_list"),
    path("workflows/<uuid:workflow_id>/", views.workflow_detail, name="workflow_detail"),
    path("workflows/<uuid:workflow_id>/approve", views.approve, name="workflow_approve"),
    path("workflows/<uuid:workflow_id>/reject", views.reject, name="workflow_reject"),
    path("healthz", views.healthz, name="healthz"),
]
