from django.apps import AppConfig


class AccountsConfig(AppConfig):
    name = "portal.accounts"
    label = "accounts"
    verbose_name = "Teams and identities"

    def ready(self) -> None:
        from portal.accounts import audit, posix

        audit.connect()
        posix.connect()
