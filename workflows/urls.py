from django.contrib.auth import views as auth_views
from django.urls import path

from workflows import views, views_deadletters

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("login/", auth_views.LoginView.as_view(template_name="workflows/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("workflows/", views.workflow_list, name="workflow_list"),
    path("workflows/<uuid:workflow_id>/", views.workflow_detail, name="workflow_detail"),
    path("workflows/<uuid:workflow_id>/approve", views.approve, name="workflow_approve"),
    path("workflows/<uuid:workflow_id>/reject", views.reject, name="workflow_reject"),
    path("workflows/<uuid:workflow_id>/steps/<str:step_key>/resolve", views.resolve_step, name="step_resolve"),
    path("dead-letters/", views_deadletters.dead_letter_list, name="dead_letter_list"),
    path("dead-letters/bulk/preview", views_deadletters.dead_letter_bulk_preview, name="dead_letter_bulk_preview"),
    path("dead-letters/bulk/replay", views_deadletters.dead_letter_bulk_replay, name="dead_letter_bulk_replay"),
    path("dead-letters/<uuid:dead_letter_id>/", views_deadletters.dead_letter_detail, name="dead_letter_detail"),
    path("dead-letters/<uuid:dead_letter_id>/replay", views_deadletters.dead_letter_replay, name="dead_letter_replay"),
    path("dead-letters/<uuid:dead_letter_id>/discard", views_deadletters.dead_letter_discard,
         name="dead_letter_discard"),
    path("healthz", views.healthz, name="healthz"),
]
