from django.apps import AppConfig


class NotifyConfig(AppConfig):
    name = "portal.notify"
    label = "notify"
    verbose_name = "Notifications"
    default_auto_field = "django.db.models.BigAutoField"

    def ready(self) -> None:
        from portal.accounts import views as account_views
        from portal.notify import views

        account_views.SECTIONS["notify"] = views.section  # the account page's notifications section
