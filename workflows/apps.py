from django.apps import AppConfig
from django.core import checks


class WorkflowsConfig(AppConfig):
    name = "workflows"
    verbose_name = "Durable workflows"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self):
        # Every process goes through here (web, qcluster and its workers,
        # management commands): each finds the same actions, or, strict,
        # none of them starts.
        from workflows.actions import plugins

        plugins.discover()
        checks.register(plugins_left_out)

        from django.contrib.auth.signals import user_logged_in

        from workflows.web.auth import remember_sign_in

        user_logged_in.connect(remember_sign_in, dispatch_uid="durableconsole.remember_sign_in")

        # Tracing, when OTEL_EXPORTER_OTLP_ENDPOINT asks for it: here, before
        # the web server loads its middleware (the Django instrumentation
        # adds its own); `qcluster` calls it again before forking workers.
        from workflows import telemetry

        telemetry.setup()


def plugins_left_out(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check` names the plugins left out (ACTION_PLUGINS_STRICT=0)."""
    from workflows.actions import registry

    return [checks.Warning(str(problem), id="workflows.W001") for problem in registry.problems()]
