import json
import re

import pytest

from provisioning.choices import JobStatus
from provisioning.models import CloudAccount, ProvisioningJob
from provisioning.pipeline import job_run_inline
from tests.provisioning.wizard import WIZARD, url, walk

pytestmark = pytest.mark.django_db


@pytest.mark.parametrize(
    ("role", "status"), [("viewer", 200), ("operator", 200), ("owner", 200), ("outsider", 404)]
)
def test_the_jobs_list_and_accounts_page_follow_the_roles(client_for, account, role, status):
    client = client_for(role)
    assert client.get("/projects/alpha/provisioning/").status_code == status
    assert client.get("/projects/alpha/provisioning/accounts/").status_code == status


@pytest.mark.parametrize(
    ("role", "status"), [("viewer", 403), ("operator", 200), ("owner", 200), ("outsider", 404)]
)
def test_the_wizard_is_for_operators(client_for, account, role, status):
    assert client_for(role).get(url("provider")).status_code == status


def test_the_wizard_goes_back_and_forth_without_losing_input_and_reviews_the_plan(
    client_for, account
):
    client = client_for("operator")
    walk(client, account)
    # back from the LB step to the pool step: what was typed is still there
    response = client.post(url("load-balancer"), {"health_check_path": "/typed", "action": "back"})
    assert response.status_code == 302 and response.url.endswith("/network/")
    assert 'value="3"' in client.get(url("pool")).content.decode()
    assert 'value="/typed"' in client.get(url("load-balancer")).content.decode()
    client.post(url("load-balancer"), {**WIZARD[4][1], "action": "next"})
    page = client.get(url("review")).content.decode()
    assert '<span id="step-count">11</span>' in page
    assert "stepCreateDNSRecord" in page and "NAT gateway" in page and "no key pair" in page
    # t3.small 0.0208 × 3 × 730 = 45.55
    assert "$45.55" in page


def test_the_wizard_refuses_a_job_name_in_use_at_its_field(client_for, account, make_job):
    make_job("shop")
    response = client_for("operator").post(
        url("provider"),
        {"name": "shop", "provider": "aws", "account": account.pk, "action": "next"},
    )
    assert response.status_code == 200
    assert (
        'id="name-error">Job shop exists already in this project: choose another name.'
        in response.content.decode()
    )


def test_each_step_is_validated(client_for, account):
    client = client_for("operator")
    walk(client, account, until="pool")
    response = client.post(
        url("pool"),
        {
            "region": "nowhere",
            "pool_mode": "ASG",
            "instance_count": "1",
            "asg_min": "3",
            "asg_max": "2",
            "asg_desired": "2",
            "action": "next",
        },
    )
    page = response.content.decode()
    assert response.status_code == 200
    assert "Give a region such as us-east-1." in page
    assert "The group&#x27;s max must be at least its min (3)." in page


def test_azure_in_the_wizard_answers_the_clean_invalid_stub(client_for, account):
    response = client_for("operator").post(
        url("provider"), {"name": "x", "provider": "azure", "account": account.pk, "action": "next"}
    )
    assert "Invalid: Azure VMSS provisioning is in preview, not yet GA" in response.content.decode()
    response = client_for("operator").post(
        url("provider"), {"name": "x", "provider": "gcp", "account": account.pk, "action": "next"}
    )
    assert "This account is on AWS: choose a GCP account" in response.content.decode()


def test_review_creates_the_job_and_the_progress_polls_slowly_when_done(client_for, account):
    client = client_for("operator")
    walk(client, account)
    response = client.post(url("review"), {"action": "create"})
    job = ProvisioningJob.objects.get()
    assert response.status_code == 302 and response.url.endswith(f"/jobs/{job.pk}/")
    assert job.steps.count() == 11 and job.config["instance_count"] == 3
    progress = f"/projects/alpha/provisioning/jobs/{job.pk}/progress/"
    assert client.get(progress).status_code == 200
    job_run_inline(job.pk)
    settled = client.get(progress).content.decode()
    assert 'hx-trigger="every 5s"' in settled
    assert client.get(progress, {"seen": seen_in(settled)}).status_code == 204  # nothing changed
    page = client.get(f"/projects/alpha/provisioning/jobs/{job.pk}/").content.decode()
    assert 'data-status="ready"' in page and "Attach load balancer" not in page
    viewer = client_for("viewer")
    assert viewer.get(progress, {"seen": seen_in(viewer.get(progress).text)}).status_code == 204
    ProvisioningJob.objects.filter(pk=job.pk).update(message="Torn down by someone else.")
    assert "Torn down by someone else." in client.get(progress, {"seen": seen_in(settled)}).text
    assert client_for("outsider").get(progress).status_code == 404


def seen_in(html: str) -> str:
    return re.search(r"\?seen=(\w+)[&\"]", html)[1]


@pytest.mark.parametrize(
    ("role", "status"), [("viewer", 403), ("operator", 302), ("outsider", 404)]
)
def test_cancel_needs_an_operator(client_for, make_job, role, status):
    job = make_job()
    response = client_for(role).post(f"/projects/alpha/provisioning/jobs/{job.pk}/cancel/")
    assert response.status_code == status
    job.refresh_from_db()
    assert job.status == (JobStatus.CANCELLED if status == 302 else JobStatus.PENDING)


def test_delete_needs_an_admin(client_for, make_job):
    job = make_job()
    client_for("owner").post(f"/projects/alpha/provisioning/jobs/{job.pk}/cancel/")
    assert (
        client_for("operator")
        .post(f"/projects/alpha/provisioning/jobs/{job.pk}/delete/")
        .status_code
        == 403
    )
    delete = f"/projects/alpha/provisioning/jobs/{job.pk}/delete/"
    asked = client_for("owner").post(delete)  # as a browser without scripts posts it
    assert asked.status_code == 200
    assert f"Tear down {job.name}? Every cloud resource its pipeline created is deleted" in (
        asked.text
    )
    assert f'action="{delete}"' in asked.text and 'name="confirm" value="1"' in asked.text
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED  # nothing happens until the answer
    assert client_for("owner").post(delete, {"confirm": "1"}).status_code == 302
    job.refresh_from_db()
    assert job.status == JobStatus.TEARING_DOWN


def test_the_teardown_button_asks_in_a_dialog_and_sends_the_answer(client_for, make_job):
    job = make_job()
    client_for("owner").post(f"/projects/alpha/provisioning/jobs/{job.pk}/cancel/")
    page = client_for("owner").get(f"/projects/alpha/provisioning/jobs/{job.pk}/").text
    assert f'hx-confirm="Tear down {job.name}? Every cloud resource' in page
    assert """hx-vals='{"confirm": "1"}'>""" in page
    stale = client_for("owner").post(  # a page from before the question
        f"/projects/alpha/provisioning/jobs/{job.pk}/delete/", HTTP_HX_REQUEST="true"
    )
    assert f"Tear down {job.name}?" in stale.text and stale["HX-Retarget"] == "body"
    job.refresh_from_db()
    assert job.status == JobStatus.CANCELLED


def test_state_never_changes_on_get(client_for, make_job):
    job = make_job()
    assert (
        client_for("owner").get(f"/projects/alpha/provisioning/jobs/{job.pk}/cancel/").status_code
        == 405
    )


def test_admins_add_accounts_with_the_secret_encrypted(client_for, project):
    data = {
        "name": "Prod",
        "provider": "aws",
        "default_region": "eu-west-1",
        "access_key_id": "AKIAEXAMPLE",
        "secret_access_key": "s3cr3t-value",
    }
    assert (
        client_for("operator").post("/projects/alpha/provisioning/accounts/", data).status_code
        == 403
    )
    assert (
        client_for("owner").post("/projects/alpha/provisioning/accounts/", data).status_code == 302
    )
    account = CloudAccount.objects.get(name="Prod")
    assert account.secret_access_key == "s3cr3t-value"
    assert "s3cr3t-value" not in account.secret_access_key_encrypted
    page = client_for("owner").get("/projects/alpha/provisioning/accounts/").content.decode()
    assert "s3cr3t-value" not in page


def test_a_role_arn_that_is_not_one_is_refused_at_its_field(client_for, project):
    data = {"name": "Prod", "provider": "aws", "default_region": "eu-west-1",
            "role_arn": "zopday-provisioner"}  # fmt: skip
    response = client_for("owner").post("/projects/alpha/provisioning/accounts/", data)
    assert response.status_code == 200
    assert (
        'id="role_arn-error">Enter the ARN of an IAM role, such as '
        "arn:aws:iam::123456789012:role/zopday-provisioner."
    ) in response.content.decode()
    assert not CloudAccount.objects.exists()
    data["role_arn"] = "arn:aws:iam::123456789012:role/ops/zopday-provisioner"
    assert (
        client_for("owner").post("/projects/alpha/provisioning/accounts/", data).status_code == 302
    )


def test_test_connection_is_a_post_for_operators(client_for, account):
    path = f"/projects/alpha/provisioning/accounts/{account.pk}/test/"
    assert client_for("viewer").post(path).status_code == 403
    assert client_for("operator").get(path).status_code == 405
    response = client_for("operator").post(path, headers={"HX-Request": "true"})
    assert response.status_code == 200
    assert "Connected as" in response.content.decode()
    account.refresh_from_db()
    assert account.last_check_ok is True


def test_test_connection_reports_the_clouds_refusal(client_for, project):
    from provisioning.services.accounts import account_create

    account = account_create(
        project=project,
        actor=None,
        name="Dead",
        access_key_id="x",
        secret_access_key="y",
        endpoint_url="http://127.0.0.1:9",
    )
    client_for("operator").post(f"/projects/alpha/provisioning/accounts/{account.pk}/test/")
    account.refresh_from_db()
    assert account.last_check_ok is False and "Cannot reach AWS" in account.last_check_message


def test_the_secret_is_never_shown_in_the_admin(admin_client, account):
    page = admin_client.get(
        f"/admin/provisioning/cloudaccount/{account.pk}/change/"
    ).content.decode()
    assert (
        account.secret_access_key_encrypted not in page
        and "testing" not in page.split("access_key_id")[-1][:0]
    )
    assert 'name="new_secret_access_key"' in page


def test_the_wizard_offers_gcps_regions_and_machine_types_and_lands_a_gcp_job(
    client_for, gcp_account
):
    client = client_for("operator")
    data = {"name": "shop", "provider": "gcp", "account": gcp_account.pk, "action": "next"}
    assert client.post(url("provider"), data).status_code == 302
    page = client.get(url("pool")).content.decode()
    assert 'value="us-central1"' in page
    pool = {"region": "us-central1", "pool_mode": "Fixed", "instance_count": "2", "asg_min": "1",
            "asg_max": "1", "asg_desired": "1", "action": "next"}  # fmt: skip
    assert client.post(url("pool"), pool).status_code == 302
    page = client.get(url("machine")).content.decode()
    assert '<option value="e2-small" selected>e2-small ($0.0168/h)</option>' in page
    assert "t3.micro" not in page
    assert '<option value="OSConfig" selected>' in page
    machine = {"instance_type": "t3.micro", "disk_gb": "20", "bootstrap_mode": "default",
               "exec_mode": "OSConfig", "action": "next"}  # fmt: skip
    page = client.post(url("machine"), machine).content.decode()
    assert "Select a valid choice. t3.micro is not one of the available choices." in page
    assert client.post(url("machine"), {**machine, "instance_type": "e2-small"}).status_code == 302
    network = {"network_mode": "new", "vpc_cidr": "10.42.0.0/16", "action": "next"}
    assert client.post(url("network"), network).status_code == 302
    lb = {"health_check_path": "/healthz", "health_check_port": "80", "action": "next"}
    assert client.post(url("load-balancer"), lb).status_code == 302
    review = client.get(url("review")).content.decode()
    assert "Cloud Router with Cloud NAT (egress only)" in review
    assert "port 22 from IAP&#x27;s proxies" in review
    assert "2 instances, spread over the region&#x27;s zones" in review
    assert "Storage (pd-balanced, 20 GB each)" in review
    assert "Cloud NAT (per VM hour + data processing)" in review
    assert "gp3" not in review and "NAT gateway" not in review
    assert client.post(url("review"), {"action": "create"}).status_code == 302
    job = ProvisioningJob.objects.get()
    assert (job.provider, job.region, job.steps.count()) == ("gcp", "us-central1", 7)
    assert job.config["instance_type"] == "e2-small"


def test_admins_add_a_gcp_account_and_the_key_never_shows_again(client_for, gcp, settings):
    from tests.fakes.gce import service_account_key

    settings.ZOPDAY_CLOUD_ENDPOINT_ALLOWLIST = [gcp.url.removeprefix("http://")]  # the fake's

    key = service_account_key(gcp, email="ops@zopday-sandbox.iam.gserviceaccount.com")
    data = {"name": "GCP", "provider": "gcp", "default_region": "us-east-1",
            "service_account_key": json.dumps(key), "endpoint_url": gcp.url}  # fmt: skip
    page = client_for("owner").post("/projects/alpha/provisioning/accounts/", data)
    assert page.status_code == 200
    html = page.content.decode()
    assert "Give a region such as us-central1." in html
    assert "BEGIN PRIVATE KEY" not in html  # the pasted key is not rendered back
    response = client_for("owner").post(
        "/projects/alpha/provisioning/accounts/", {**data, "default_region": "us-central1"}
    )
    assert response.status_code == 302
    account = CloudAccount.objects.get(name="GCP")
    assert (account.provider, account.gcp_project) == ("gcp", "zopday-sandbox")
    listing = client_for("viewer").get("/projects/alpha/provisioning/accounts/").content.decode()
    assert "BEGIN PRIVATE KEY" not in listing and key["private_key_id"] not in listing


def test_choosing_another_cloud_in_the_wizard_asks_the_later_steps_again(
    client_for, account, gcp_account
):
    client = client_for("operator")
    walk(client, account)  # every step answered for AWS
    data = {"name": "shop", "provider": "gcp", "account": gcp_account.pk, "action": "next"}
    assert client.post(url("provider"), data).status_code == 302
    response = client.get(url("review"))
    assert response.status_code == 302 and response.url.endswith("/new/pool/")
    assert 'value="us-central1"' in client.get(url("pool")).content.decode()


def test_the_forward_button_comes_first_so_enter_goes_forward(client_for, account):
    client = client_for("operator")
    walk(client, account, until="machine")
    step = client.get(url("machine")).text
    assert step.index('value="next"') < step.index('value="back"')
    assert 'class="actions forward-first"' in step
    walk(client, account)
    review = client.get(url("review")).text
    assert review.index('value="create"') < review.index('value="back"')
    assert 'hx-disabled-elt="#wizard .actions button"' in review


def test_back_from_the_review_keeps_every_value_with_the_schedule_and_its_time_zone(
    client_for, account
):
    client = client_for("operator")
    walk(client, account)
    back = client.post(
        url("review"),
        {"action": "back", "schedule": "weeknights-weekends", "schedule_tz": "Asia/Tokyo"},
    )
    assert back.status_code == 302 and back.url.endswith("/load-balancer/")
    for step, data in WIZARD:
        page = client.get(url(step)).text
        for field, value in data.items():
            if field == "load_balancer":
                assert re.search(r'name="load_balancer"[^>]*checked', page), step
            elif field in ("provider", "pool_mode", "bootstrap_mode", "network_mode"):
                assert re.search(rf'name="{field}" value="{value}"[^>]*checked', page), field
            elif field in ("instance_type", "exec_mode"):
                assert re.search(rf'<option value="{value}"[^>]*selected', page), field
            else:
                assert f'value="{value}"' in page, (step, field)
    client.post(url("load-balancer"), {**WIZARD[4][1], "action": "next"})
    review = client.get(url("review")).text
    assert re.search(r'name="schedule" value="weeknights-weekends" checked', review)
    assert 'name="schedule_tz" value="Asia/Tokyo"' in review
    # unticked on the way back: it stays unticked
    client.post(url("review"), {"action": "back", "schedule_tz": "Asia/Tokyo"})
    review = client.get(url("review")).text
    assert not re.search(r'name="schedule" value="weeknights-weekends" checked', review)
    assert 'name="schedule_tz" value="Asia/Tokyo"' in review


def test_create_twice_lands_on_the_same_job(client_for, account):
    client = client_for("operator")
    walk(client, account)
    first = client.post(url("review"), {"action": "create"})
    second = client.post(url("review"), {"action": "create"})
    job = ProvisioningJob.objects.get()
    assert first.url == second.url == f"/projects/alpha/provisioning/jobs/{job.pk}/"
    htmx = client.post(url("review"), {"action": "create"}, headers={"HX-Request": "true"})
    assert htmx["HX-Redirect"] == f"/projects/alpha/provisioning/jobs/{job.pk}/"
    assert ProvisioningJob.objects.count() == 1
    # the next environment starts from a blank wizard and is a job of its own
    assert 'value="shop"' not in client.get(url("provider")).text
    walk(client, account, name="shop-2")
    client.post(url("review"), {"action": "create"})
    assert ProvisioningJob.objects.count() == 2


def test_the_savings_row_shows_only_for_a_fixed_pool_the_schedule_can_stop(client_for, account):
    client = client_for("operator")
    walk(client, account)
    fixed = client.get(url("review")).text
    assert 'id="cost-savings"' in fixed and "With a weeknight/weekend stop schedule" in fixed
    asg = {**WIZARD[1][1], "pool_mode": "ASG", "asg_max": "2", "asg_desired": "2"}
    assert client.post(url("pool"), {**asg, "action": "next"}).status_code == 302
    page = client.get(url("review")).text
    assert "auto scaling group" in page
    assert 'id="cost-savings"' not in page and "stop schedule" not in page


def test_fields_of_the_pool_mode_not_chosen_may_be_left_empty(client_for, account):
    client = client_for("operator")
    walk(client, account, until="pool")
    asg = {"region": "us-east-1", "pool_mode": "ASG", "instance_count": "", "asg_min": "1",
           "asg_max": "2", "asg_desired": "2", "action": "next"}  # fmt: skip
    assert client.post(url("pool"), asg).status_code == 302
    fixed = {"region": "us-east-1", "pool_mode": "Fixed", "instance_count": "2", "action": "next"}
    assert client.post(url("pool"), fixed).status_code == 302
    # the chosen mode's fields are still required, at the field
    missing = client.post(url("pool"), {**fixed, "instance_count": ""})
    assert missing.status_code == 200
    assert re.search(r'id="instance_count-error"[^>]*>This field is required', missing.text)
    missing = client.post(url("pool"), {**asg, "asg_desired": ""})
    assert re.search(r'id="asg_desired-error"[^>]*>This field is required', missing.text)
    assert "asg_min-error" not in missing.text and "instance_count-error" not in missing.text
    # without a load balancer, its health check port is not asked for
    client.post(url("pool"), fixed)
    for step, data in WIZARD[2:4]:
        assert client.post(url(step), {**data, "action": "next"}).status_code == 302
    no_lb = {"health_check_path": "/healthz", "health_check_port": "", "action": "next"}
    assert client.post(url("load-balancer"), no_lb).status_code == 302
    with_lb = client.post(url("load-balancer"), {**no_lb, "load_balancer": "on"})
    assert re.search(r'id="health_check_port-error"[^>]*>This field is required', with_lb.text)
    client.post(url("load-balancer"), no_lb)
    client.post(url("review"), {"action": "create"})
    config = ProvisioningJob.objects.get().config
    assert (config["instance_count"], config["load_balancer"]) == (2, False)
    assert config["health_check_port"] == 80


def review_without_a_load_balancer(client, account, *, count: str) -> str:
    walk(client, account, until="pool")
    pool = {**WIZARD[1][1], "instance_count": count, "action": "next"}
    assert client.post(url("pool"), pool).status_code == 302
    for step, data in WIZARD[2:4]:
        assert client.post(url(step), {**data, "action": "next"}).status_code == 302
    lb = {"health_check_path": "/healthz", "health_check_port": "80", "action": "next"}
    assert client.post(url("load-balancer"), lb).status_code == 302
    return client.get(url("review")).content.decode()


def test_the_review_leaves_out_the_load_balancer_when_none_was_chosen(client_for, account):
    review = review_without_a_load_balancer(client_for("operator"), account, count="2")
    cost = re.search(r'<table id="cost">.*?</table>', review, re.S).group()
    assert "Instances (t3.small × 2 × 730 h)" in cost
    assert "Load balancer" not in cost and "listener HTTP" not in review


def test_the_review_counts_one_instance_in_the_singular_and_more_in_the_plural(client_for, account):
    one = review_without_a_load_balancer(client_for("operator"), account, count="1")
    assert "<li>1 instance</li>" in one and "instance(s)" not in one
    two = review_without_a_load_balancer(client_for("operator"), account, count="2")
    assert "<li>2 instances</li>" in two


def test_the_review_names_the_bootstrap_as_the_machines_step_does(client_for, account):
    client = client_for("operator")
    machines = client.get(url("machine")).content.decode()
    walk(client, account)
    review = client.get(url("review")).content.decode()
    assert "Docker + NGINX on nginx-on-zop-net" in machines
    assert "bootstrap: Docker + NGINX on nginx-on-zop-net" in review
    assert "bootstrap default" not in review
