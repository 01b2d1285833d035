from django.apps import AppConfig


class WorkerConfig(AppConfig):
    name = "portal.worker"
    label = "worker"

    def ready(self) -> None:
        from portal.burst import observe
        from portal.worker import capacity, dryrun, gpu_types, kueue, wake
        from portal.workloads import gpu_types as requested_types
        from portal.workloads import kick, preview

        kueue.connect()  # a quota or department change reconciles Kueue at the next cycle
        kick.register(kick.Sender(wake.kick, wake.CHANNEL))  # the workloads layer asks through it
        requested_types.register(gpu_types.observed)  # and learns what each fabric was seen to have
        preview.register(dryrun.dry_run)  # the submit form's Check button asks through it
        observe.register(capacity.observe)  # a burst pool asks a fabric at once through this
