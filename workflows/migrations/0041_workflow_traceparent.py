from django.db import migrations, models


class Migration(migrations.Migration):
    dependencies = [
        ("workflows", "0040_policy_asks"),
    ]

    operations = [
        migrations.AddField(
            model_name="workflow",
            name="traceparent",
            field=models.CharField(blank=True, db_default="", default="", max_length=55),
        ),
    ]
