from django.apps import AppConfig


class ApiConfig(AppConfig):
    name = "portal.api"
    label = "api"
    verbose_name = "REST API v1"

    def ready(self) -> None:
        from portal.api import schema  # noqa: F401 (registers the OpenAPI auth extension)
