from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "portal.worker"
    label = "worker"
