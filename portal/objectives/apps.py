from django.apps import AppConfig


class ObjectivesConfig(AppConfig):
    name = "portal.objectives"
    label = "objectives"
    verbose_name = "Wait objectives"
    default_auto_field = "django.db.models.BigAutoField"
