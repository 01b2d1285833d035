# What the worker observes of a fabric (its capacity every GRIDLANE_CAPACITY_SECONDS, its health) is written on the
# fabric's row, and migration 0013's trigger moved the submit generation with every write of that row: each
# observation dropped every kept submit context, every kept token and the worker's settled rows. No kept submit
# context reads what is observed (a submit checks a request against what IT declared), so the fabric's trigger now
# fires only where a column IT declares is written (with any INSERT, DELETE or TRUNCATE, as before). The worker
# reads the observed columns afresh at each build (portal.worker.snapshot). PostgreSQL only, as 0013.

from django.db import migrations

FUNCTION = "workloads_submit_changed"  # migration 0013's
TABLE = "queues_fabric"
# The columns of a fabric whose writes move the generation: what IT declares (tests/api/test_submit_context.py
# holds every column of the table to this list or OBSERVED, so that a new column is sorted into one of them).
DECLARED = (
    "id",
    "name",
    "kind",
    "enabled",
    "gpu_flavor",
    "gpus_milli",
    "cpus_milli",
    "memory_mib",
    "gpu_sharing",
    "settings",
    "gpu_hour_price",
    "cpu_hour_price",
    "memory_gb_hour_price",
)
# What the worker writes from what it observes: moves no generation.
OBSERVED = (
    "healthy",
    "health_detail",
    "observed_gpus_milli",
    "observed_cpus_milli",
    "observed_memory_mib",
    "observed_at",
    "observed_detail",
)


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    of = ", ".join(f'"{c}"' for c in DECLARED)
    schema_editor.execute(f'DROP TRIGGER IF EXISTS "{FUNCTION}" ON "{TABLE}"')
    schema_editor.execute(
        f'CREATE TRIGGER "{FUNCTION}" AFTER INSERT OR UPDATE OF {of} OR DELETE OR TRUNCATE ON "{TABLE}" '
        f'FOR EACH STATEMENT EXECUTE FUNCTION "{FUNCTION}"()'
    )


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP TRIGGER IF EXISTS "{FUNCTION}" ON "{TABLE}"')
    schema_editor.execute(
        f'CREATE TRIGGER "{FUNCTION}" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{TABLE}" '
        f'FOR EACH STATEMENT EXECUTE FUNCTION "{FUNCTION}"()'
    )


class Migration(migrations.Migration):
    dependencies = [
        ("queues", "0015_priority_tiers"),
        ("workloads", "0015_gpu_type"),
    ]

    operations = [migrations.RunPython(forward, backward)]
