# The submit's context generation (PostgreSQL only): one row whose number changes, in the same transaction, with
# every statement that writes a table the submit's context is read from (portal.workloads.context). A web process
# keeps a context it read for a second, and uses it again only while this number is what it was when it read it:
# a change of a queue, a target, a fabric, a team, a membership, a quota, a grant or a tier is seen by the very
# next submit. The number comes from a sequence, so it never repeats, even where a transaction that moved it
# rolled back. Statement triggers, so that any writer is seen: the admin, the API, a shell, a bulk UPDATE, raw
# SQL, a TRUNCATE.

from django.db import migrations

TABLE = "workloads_submit_generation"
FUNCTION = "workloads_submit_changed"
# Every table the context's statements read (a test compares this with the statements' own SQL).
WATCHED = (
    "accounts_membership",
    "accounts_posixpolicy",
    "accounts_resourcegroup",
    "accounts_serviceidentity",
    "accounts_serviceidentity_allowed_queues",
    "queues_fabric",
    "queues_prioritytier",
    "queues_prioritytier_allowed_groups",
    "queues_queue",
    "queues_queue_allowed_groups",
    "queues_queuetarget",
    "queues_quota",
    "queues_quotagrant",
)


def watch(tables: tuple[str, ...]) -> list[str]:
    """The statements that make a write to each of `tables` move the generation."""
    return [
        f'CREATE TRIGGER "{FUNCTION}" AFTER INSERT OR UPDATE OR DELETE OR TRUNCATE ON "{table}" '
        f'FOR EACH STATEMENT EXECUTE FUNCTION "{FUNCTION}"()'
        for table in tables
    ]


def unwatch(tables: tuple[str, ...]) -> list[str]:
    return [f'DROP TRIGGER IF EXISTS "{FUNCTION}" ON "{table}"' for table in tables]


FORWARD = [
    f'CREATE SEQUENCE "{TABLE}_seq"',
    f'CREATE TABLE "{TABLE}" ("n" bigint NOT NULL)',
    f'INSERT INTO "{TABLE}" ("n") VALUES (nextval(\'"{TABLE}_seq"\'))',
    f"""CREATE FUNCTION "{FUNCTION}"() RETURNS trigger LANGUAGE plpgsql AS $$
BEGIN
    UPDATE "{TABLE}" SET "n" = nextval('"{TABLE}_seq"');
    RETURN NULL;
END
$$""",
    *watch(WATCHED),
]
BACKWARD = [
    *unwatch(WATCHED),
    f'DROP FUNCTION IF EXISTS "{FUNCTION}"()',
    f'DROP TABLE IF EXISTS "{TABLE}"',
    f'DROP SEQUENCE IF EXISTS "{TABLE}_seq"',
]


def forward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        for statement in FORWARD:
            schema_editor.execute(statement)


def backward(apps, schema_editor):  # type: ignore[no-untyped-def]
    if schema_editor.connection.vendor == "postgresql":
        for statement in BACKWARD:
            schema_editor.execute(statement)


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_member_gpu_limit"),
        ("queues", "0015_priority_tiers"),
        ("workloads", "0012_composite_indexes_serve_the_keys"),
    ]

    operations = [migrations.RunPython(forward, backward)]
