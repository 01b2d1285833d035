import django.db.models.deletion
from django.conf import settings
from django.db import migrations, models


class Migration(migrations.Migration):

    dependencies = [
        ('accounts', '0002_claim_mappings_service_identities_audit'),
        ('usage', '0001_usage_samples_and_rollups'),
        migrations.swappable_dependency(settings.AUTH_USER_MODEL),
    ]

    operations = [
        migrations.CreateModel(
            name='UsageMemberRollup',
            fields=[
                ('id', models.BigAutoField(auto_created=True, primary_key=True, serialize=False, verbose_name='ID')),
                ('hour', models.DateTimeField(help_text='The start of the hour, UTC.')),
                ('gpu_hours', models.FloatField(default=0.0)),
                ('idle_gpu_hours', models.FloatField(default=0.0)),
                ('group', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to='accounts.resourcegroup')),
                ('user', models.ForeignKey(on_delete=django.db.models.deletion.CASCADE, related_name='+', to=settings.AUTH_USER_MODEL)),
            ],
            options={
                'indexes': [models.Index(fields=['group', 'hour'], name='usage_member_group_hour')],
                'constraints': [models.UniqueConstraint(fields=('group', 'user', 'hour'), name='one_member_rollup_per_group_user_hour')],
            },
        ),
    ]
