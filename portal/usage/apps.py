from django.apps import AppConfig


class UsageConfig(AppConfig):
    name = "portal.usage"
    label = "usage"
