from django.apps import AppConfig
from django.apps import apps as global_apps
from django.core import checks
from django.db.models.signals import post_migrate


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
        post_migrate.connect(seed_roles_and_default_team, sender=self, dispatch_uid="durableconsole.seed")

        from django.contrib.auth.signals import user_logged_in

        from workflows.web.auth import remember_sign_in

        user_logged_in.connect(remember_sign_in, dispatch_uid="durableconsole.remember_sign_in")

        # Tracing, when OTEL_EXPORTER_OTLP_ENDPOINT asks for it: here, before
        # the web server loads its middleware (the Django instrumentation
        # adds its own); `qcluster` calls it again before forking workers.
        from workflows import telemetry

        telemetry.setup()


def seed_roles_and_default_team(apps=global_apps, using="default", **kwargs) -> None:
    """The role groups and the `default` team, as migrations 0002 and 0021
    made them, again after `manage.py flush` empties every table (flush
    sends post_migrate, as `migrate` does; Django brings back content types
    and permissions the same way). Only what is missing is created, with
    the models as the migrations left them (`apps`): a database migrated
    back before the teams gets its groups alone."""
    from workflows import roles, teams

    for label, field_value in [("auth.Group", name) for name in roles.ALL] + [("workflows.Team", teams.DEFAULT)]:
        try:
            model = apps.get_model(label)
        except LookupError:
            continue
        model.objects.using(using).get_or_create(name=field_value)


def plugins_left_out(app_configs, **kwargs) -> list[checks.CheckMessage]:
    """`manage.py check` names the plugins left out (ACTION_PLUGINS_STRICT=0)."""
    from workflows.actions import registry

    return [checks.Warning(str(problem), id="workflows.W001") for problem in registry.problems()]
