from django.apps import AppConfig


class ConnectConfig(AppConfig):
    name = "portal.connect"
    label = "connect"
    verbose_name = "Connect"
