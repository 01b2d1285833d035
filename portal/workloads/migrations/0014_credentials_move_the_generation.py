# A token kept for the API's single submit (portal.api.auth.kept) is used only while the
# submit generation (migration 0013) is the one it was read under: every write that could end a token's use moves
# it. The agent's row (accounts_serviceidentity) moves it already; these add the token's and its user's, each
# only where a column the lookup decides by is written, so that recording a token's use (last_used_at) or a
# person's sign-in (last_login) moves nothing. Statement triggers, as in 0013: any writer is seen. PostgreSQL
# only; a token is kept nowhere else.

from django.db import migrations

FUNCTION = "workloads_submit_changed"  # migration 0013's
# table: the columns whose writes move the generation (with any DELETE or TRUNCATE of the table)
WATCHED_COLUMNS = {
    "accounts_apitoken": ("digest", "expires_at", "revoked_at", "user_id"),
    "auth_user": ("id", "is_active", "is_staff", "is_superuser", "username"),
}


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table, columns in WATCHED_COLUMNS.items():
        of = ", ".join(f'"{c}"' for c in columns)
        schema_editor.execute(
            f'CREATE TRIGGER "{FUNCTION}" AFTER UPDATE OF {of} OR DELETE OR TRUNCATE ON "{table}" '
            f'FOR EACH STATEMENT EXECUTE FUNCTION "{FUNCTION}"()'
        )


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor != "postgresql":
        return
    for table in WATCHED_COLUMNS:
        schema_editor.execute(f'DROP TRIGGER IF EXISTS "{FUNCTION}" ON "{table}"')


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_member_gpu_limit"),
        ("auth", "0012_alter_user_first_name_max_length"),
        ("workloads", "0013_submit_generation"),
    ]

    operations = [migrations.RunPython(forward, backward)]
