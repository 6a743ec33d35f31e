from django.db import migrations


def refuse_stopping_group_vms(apps, schema_editor):
    """Instances registered before Instance.stop_refusal: those of auto scaling groups get it."""
    JobInstance = apps.get_model("provisioning", "JobInstance")
    Instance = apps.get_model("instances", "Instance")
    for link in JobInstance.objects.filter(job__pool_mode="ASG").select_related("job"):
        Instance.objects.filter(pk=link.instance_id).update(
            stop_refusal=(
                f"This VM belongs to the auto scaling group of job {link.job.name}: the group "
                "would replace a stopped VM. Change the group's desired capacity instead."
            )
        )


class Migration(migrations.Migration):

    dependencies = [
        ("instances", "0005_instance_stop_refusal"),
        ("provisioning", "0003_job_instance"),
    ]

    operations = [
        migrations.RunPython(refuse_stopping_group_vms, migrations.RunPython.noop),
    ]
