from django.apps import AppConfig


class QueuesConfig(AppConfig):
    name = "portal.queues"
    label = "queues"
    verbose_name = "Queues and fabrics"
