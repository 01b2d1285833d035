from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "portal.worker"
    label = "worker"

    def ready(self) -> None:
        from portal.worker import kueue

        kueue.connect()  # a quota or department change reconciles Kueue at the next cycle
