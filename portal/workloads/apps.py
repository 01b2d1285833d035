from django.apps import AppConfig


class WorkloadsConfig(AppConfig):
    name = "portal.workloads"
    label = "workloads"

    def ready(self) -> None:
        from portal import sql

        sql.connect()  # timestamps read by psycopg's compiled loader
