from django.apps import AppConfig


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Durable workflows"
    default_auto_field = "django.db.models.BigAutoField"
