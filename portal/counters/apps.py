from django.apps import AppConfig


class CountersConfig(AppConfig):
    name = "portal.counters"
    label = "counters"
    verbose_name = "Counters and cursors"
