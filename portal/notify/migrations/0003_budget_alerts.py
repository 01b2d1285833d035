# Budget alerts (portal.budgets.step): a new kind of message, which everyone who set up notifications hears of
# unless they turn it off, as they would have had it been there when they chose (a new preference has every event).

from django.db import migrations, models


def hear_of_budgets(apps, schema_editor):  # type: ignore[no-untyped-def]
    Preference = apps.get_model("notify", "Preference")
    for pref in Preference.objects.all():
        if "budget" not in pref.events:
            pref.events = [*pref.events, "budget"]
            pref.save(update_fields=["events"])


class Migration(migrations.Migration):
    dependencies = [
        ("notify", "0002_objective_event"),
    ]

    operations = [
        migrations.AlterField(
            model_name="notification",
            name="event",
            field=models.CharField(
                choices=[
                    ("started", "Started"),
                    ("finished", "Finished"),
                    ("failed", "Failed or expired"),
                    ("idle", "Idle warning"),
                    ("lease", "Lease ending"),
                    ("objective", "Wait objective burning"),
                    ("budget", "Budget thresholds (leads)"),
                ],
                max_length=10,
            ),
        ),
        migrations.RunPython(hear_of_budgets, migrations.RunPython.noop),
    ]
