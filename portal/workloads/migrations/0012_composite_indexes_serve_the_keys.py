# The single-column indexes of owner, group and array_parent go: the composite indexes that lead with each
# (Meta.indexes) serve the same look-ups, and every index is written on each insert and change of state.
# Only the indexes are dropped: Django's own AlterField would also drop and re-add each foreign key, which
# checks every row of the table again while holding it locked.

import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models

INDEXES = {
    "workloads_workload_array_parent_id_145ce20b": "array_parent_id",
    "workloads_workload_group_id_fd4a4866": "group_id",
    "workloads_workload_owner_id_54d3783b": "owner_id",
}


class Migration(migrations.Migration):
    dependencies = [
        ("accounts", "0007_member_gpu_limit"),
        ("workloads", "0011_code_and_requirements"),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            database_operations=[
                migrations.RunSQL(
                    [f'DROP INDEX IF EXISTS "{name}"' for name in INDEXES],
                    reverse_sql=[
                        f'CREATE INDEX "{name}" ON "workloads_workload" ("{column}")'
                        for name, column in INDEXES.items()
                    ],
                )
            ],
            state_operations=[
                migrations.AlterField(
                    model_name="workload",
                    name="array_parent",
                    field=models.ForeignKey(
                        blank=True,
                        db_index=False,
                        editable=False,
                        null=True,
                        on_delete=django.db.models.deletion.CASCADE,
                        related_name="elements",
                        to="workloads.workload",
                    ),
                ),
                migrations.AlterField(
                    model_name="workload",
                    name="group",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="workloads",
                        to="accounts.resourcegroup",
                    ),
                ),
                migrations.AlterField(
                    model_name="workload",
                    name="owner",
                    field=models.ForeignKey(
                        db_index=False,
                        on_delete=django.db.models.deletion.PROTECT,
                        related_name="workloads",
                        to=settings.AUTH_USER_MODEL,
                    ),
                ),
            ],
        ),
    ]
