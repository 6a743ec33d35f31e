"""Provisioning jobs in manifests (kind: ProvisioningJob), against the moto account: a job made
by apply or by the API exports as a document that applies back as no change; bad input is told
at its field's line and makes no job."""

import pytest
import yaml

from instances.manifests import ManifestInvalid, manifest_apply, project_manifest
from instances.models import ManagedObject
from provisioning.choices import JobStatus
from provisioning.models import ProvisioningJob

pytestmark = pytest.mark.django_db

JOB = """\
kind: ProvisioningJob
project: alpha
name: web
spec:
  account: Sandbox AWS
  pool_mode: ASG
  asg_min: 1
  asg_desired: 2
  asg_max: 3
  load_balancer: true
  health_check_path: /up
"""


def verbs(plans):
    return {(plan.document.kind, plan.document.name): plan.verb for plan in plans}


def test_a_job_document_and_one_from_the_api_export_back_as_no_change(
    api_for, owner, project, account
):
    plans = manifest_apply(sources=[("jobs.yaml", JOB)], actor=owner)
    assert verbs(plans) == {("ProvisioningJob", "web"): "create"}
    job = ProvisioningJob.objects.get(name="web")
    assert (job.pool_mode, job.config["asg_max"], job.config["health_check_path"]) == (
        "ASG", 3, "/up"
    )  # fmt: skip
    body = {"project": "alpha", "account": account.pk, "name": "api", "instance_count": 2}
    assert api_for("operator").post("/provisioning-jobs", body).status_code == 201

    exported = project_manifest(project, redact=True)
    assert "name: api" in exported and "account: Sandbox AWS" in exported
    plans = manifest_apply(sources=[("export.yaml", exported)], actor=owner, dry_run=True)
    assert verbs(plans) == {
        ("ProvisioningJob", "api"): "unchanged", ("ProvisioningJob", "web"): "unchanged"
    }  # fmt: skip
    assert ProvisioningJob.objects.count() == 2
    assert set(ManagedObject.objects.values_list("name", flat=True)) == {"web"}


def test_a_changed_choice_of_a_job_is_refused_at_its_line(owner, project, account):
    manifest_apply(sources=[("jobs.yaml", JOB)], actor=owner)
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(
            sources=[("jobs.yaml", JOB.replace("asg_max: 3", "asg_max: 4"))], actor=owner
        )
    [problem] = raised.value.problems
    assert str(problem).startswith(
        "jobs.yaml:9 (provisioning-job web): asg_max: Cannot change on an existing provisioning "
        "job: web has 3, the manifest says 4."
    )


def test_bad_job_documents_are_told_at_each_fields_line_and_make_no_job(owner, project, account):
    bad = (
        JOB.replace("asg_max: 3", "asg_max: 0")
        .replace("health_check_path: /up", "health_check_path: healthz")
        .replace("  load_balancer: true\n", "  load_balancer: true\n  instance_type: x9.huge\n")
    )
    unknown = (
        JOB.replace("name: web", "name: other")
        .replace("account: Sandbox AWS", "account: Nowhere")
        .replace("asg_min: 1", "asg_min: many")
        .replace("pool_mode: ASG", "pool_mode: ASG\n  asg_maxx: 3")
    )
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("jobs.yaml", f"{bad}---\n{unknown}")], actor=owner)
    found = [str(problem).split(": ", 2)[:2] for problem in raised.value.problems]
    assert sorted(found) == sorted([
        ["jobs.yaml:9 (provisioning-job web)", "asg_max"],
        ["jobs.yaml:11 (provisioning-job web)", "instance_type"],
        ["jobs.yaml:12 (provisioning-job web)", "health_check_path"],
        ["jobs.yaml:18 (provisioning-job other)", "account"],
        ["jobs.yaml:20 (provisioning-job other)", "asg_maxx"],
        ["jobs.yaml:21 (provisioning-job other)", "asg_min"],
    ])  # fmt: skip
    assert not ProvisioningJob.objects.exists() and not ManagedObject.objects.exists()


def test_a_gcp_job_takes_its_providers_defaults_and_exports_back_as_no_change(
    owner, project, gcp_account
):
    document = "kind: ProvisioningJob\nproject: alpha\nname: g\nspec:\n  account: Sandbox GCP\n"
    with pytest.raises(ManifestInvalid) as raised:
        manifest_apply(sources=[("jobs.yaml", document)], actor=owner)
    assert [problem.path for problem in raised.value.problems] == ["account"]  # not on aws
    manifest_apply(sources=[("jobs.yaml", f"{document}  provider: gcp\n")], actor=owner)
    job = ProvisioningJob.objects.get(name="g")
    assert (job.config["region"], job.config["exec_mode"]) == ("us-central1", "OSConfig")
    exported = project_manifest(project, redact=True)
    plans = manifest_apply(sources=[("export.yaml", exported)], actor=owner, dry_run=True)
    assert verbs(plans) == {("ProvisioningJob", "g"): "unchanged"}


def test_job_pages_have_an_export_button_every_member_may_use(client_for, make_job, owner):
    job, gone = make_job("web"), make_job("old")
    ProvisioningJob.objects.filter(pk=gone.pk).update(status=JobStatus.DELETED)
    link = "/projects/alpha/manifest/ProvisioningJob/web.yaml"
    for role in ("viewer", "operator", "owner"):
        client = client_for(role)
        listed = client.get("/projects/alpha/provisioning/").text
        assert link in listed and "ProvisioningJob/old.yaml" not in listed
        assert link in client.get(f"/projects/alpha/provisioning/jobs/{job.pk}/").text
        answer = client.get(link)
        assert answer["Content-Disposition"] == 'attachment; filename="alpha-web.yaml"'
        [document] = yaml.safe_load_all(answer.content)
        assert (document["kind"], document["spec"]["account"]) == ("ProvisioningJob", "Sandbox AWS")
    assert client_for("outsider").get(link).status_code == 404
    assert ProvisioningJob.objects.get(pk=job.pk).status == job.status
