from django.apps import AppConfig


class CodeConfig(AppConfig):
    name = "portal.code"
    label = "code"
    verbose_name = "Code bundles"

    def ready(self) -> None:
        """A submit's code is checked by this app's rules (the workloads layer's seam: portal.workloads.code_rules)."""
        from portal.code import services
        from portal.workloads import code_rules

        code_rules.register(services)
