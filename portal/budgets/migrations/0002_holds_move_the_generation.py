# The worker's snapshot keeps which work budgets hold (Budget.held_reason) under the submit generation (migration
# workloads 0013), as it keeps what IT configures: so a change of a hold must move it. Only a hold's columns, a
# budget's insert and its deletion move it: the budget step writes every budget's spend each time it runs, and
# that moves nothing (a kept snapshot never reads it). Statement triggers, as in 0013 and 0014. PostgreSQL only.

from django.db import migrations

FUNCTION = "workloads_submit_changed"  # migration workloads 0013's
TABLE = "budgets_budget"
# The columns whose writes move the generation (with any INSERT, DELETE or TRUNCATE of the table).
WATCHED_COLUMNS = {TABLE: ("held_reason", "team_id", "user_id", "scope")}


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    of = ", ".join(f'"{c}"' for c in WATCHED_COLUMNS[TABLE])
    schema_editor.execute(
        f'CREATE TRIGGER "{FUNCTION}" AFTER INSERT OR UPDATE OF {of} OR DELETE OR TRUNCATE ON "{TABLE}" '
        f'FOR EACH STATEMENT EXECUTE FUNCTION "{FUNCTION}"()'
    )


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    schema_editor.execute(f'DROP TRIGGER IF EXISTS "{FUNCTION}" ON "{TABLE}"')


class Migration(migrations.Migration):
    dependencies = [
        ("budgets", "0001_budgets"),
        ("workloads", "0013_submit_generation"),
    ]

    operations = [migrations.RunPython(forward, backward)]
