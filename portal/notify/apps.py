from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "portal.notify"
    label = "notify"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"
