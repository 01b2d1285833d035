from django.db import migrations


class Migration(migrations.Migration):
    """WorkerStats moves to the counters app (counters.Counter, the same table): the worker's state forgets it."""

    dependencies = [
        ("worker", "0002_usage_and_metrics"),
        ("counters", "0001_initial"),
    ]

    operations = [
        migrations.SeparateDatabaseAndState(
            state_operations=[migrations.DeleteModel(name="WorkerStats")],
            database_operations=[],
        ),
    ]
