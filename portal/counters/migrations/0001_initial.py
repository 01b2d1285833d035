from django.db import migrations, models


class Migration(migrations.Migration):
    """The worker's stats rows become the counters app's: the same table, now owned here (no database change)."""

    initial = True

    dependencies = [
        ("worker", "0002_usage_and_metrics"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[
                migrations.CreateModel(
                    name="Counter",
                    fields=[
                        ("name", models.CharField(max_length=50, primary_key=True, serialize=False)),
                        ("value", models.FloatField(default=0.0)),
                    ],
                    options={"db_table": "worker_workerstats"},
                ),
            ],
            database_operations=[],
        ),
    ]
