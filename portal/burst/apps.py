from django.apps import AppConfig


class BurstConfig(AppConfig):
    name = "portal.burst"
    label = "burst"
    verbose_name = "Cloud burst"
