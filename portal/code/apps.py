from django.apps import AppConfig


class CodeConfig(AppConfig):
    name = "portal.code"
    label = "code"
    verbose_name = "Code bundles"
