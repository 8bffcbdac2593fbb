from django.contrib.auth import views as auth_views
from django.urls import path

from workflows.web import views, views_audit, views_compensation, views_deadletters, views_ops

urlpatterns = [
    path("", views.inbox, name="inbox"),
    path("login/", auth_views.LoginView.as_view(template_name="workflows/login.html"), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("workflows/", views.workflow_list, name="workflow_list"),
    path("workflows/<uuid:workflow_id>/", views.workflow_detail, name="workflow_detail"),
    path("workflows/<uuid:workflow_id>/approve", views.approve, name="workflow_approve"),
    path("workflows/<uuid:workflow_id>/reject", views.reject, name="workflow_reject"),
    path("workflows/<uuid:workflow_id>/steps/<str:step_key>/resolve", views.resolve_step, name="step_resolve"),
    path("workflows/<uuid:workflow_id>/compensate", views_compensation.compensation_request,
         name="compensation_request"),
    path("compensations/", views_compensation.compensation_list, name="compensation_list"),
    path("compensations/<uuid:compensation_id>/", views_compensation.compensation_detail, name="compensation_detail"),
    path("compensations/<uuid:compensation_id>/authorize", views_compensation.compensation_authorize,
         name="compensation_authorize"),
    path("compensations/<uuid:compensation_id>/decline", views_compensation.compensation_decline,
         name="compensation_decline"),
    path("dead-letters/", views_deadletters.dead_letter_list, name="dead_letter_list"),
    path("dead-letters/bulk/preview", views_deadletters.dead_letter_bulk_preview, name="dead_letter_bulk_preview"),
    path("dead-letters/bulk/replay", views_deadletters.dead_letter_bulk_replay, name="dead_letter_bulk_replay"),
    path("dead-letters/<uuid:dead_letter_id>/", views_deadletters.dead_letter_detail, name="dead_letter_detail"),
    path("dead-letters/<uuid:dead_letter_id>/replay", views_deadletters.dead_letter_replay, name="dead_letter_replay"),
    path("dead-letters/<uuid:dead_letter_id>/discard", views_deadletters.dead_letter_discard,
         name="dead_letter_discard"),
    path("attention/", views_ops.attention, name="attention"),
    path("dashboard/", views_ops.dashboard, name="dashboard"),
    path("audit/", views_audit.audit_list, name="audit_list"),
    path("audit/verify", views_audit.audit_verify, name="audit_verify"),
    path("audit/export.csv", views_audit.audit_export_csv, name="audit_export_csv"),
    path("audit/export.jsonl", views_audit.audit_export_jsonl, name="audit_export_jsonl"),
    path(".well-known/jwks.json", views_audit.jwks, name="jwks"),
    path("healthz", views.healthz, name="healthz"),
    path("metrics", views_ops.metrics, name="metrics"),
]
