"""A GCP VM's serial output, live on its page through the Compute API (getSerialPortOutput), and
the Azure exec channel gated as Azure provisioning is."""

import pytest
import requests
from google.auth.transport.requests import AuthorizedSession
from google.oauth2 import service_account

from instances.choices import PowerState
from instances.models import Instance
from provisioning.choices import JobStatus
from provisioning.clouds import CLOUDS
from provisioning.infra import InfraConfig
from provisioning.pipeline import job_run_inline
from provisioning.validation import machine_errors
from tests.fakes.gce import BOOT_LINES, service_account_key
from tests.provisioning.vms import instances_of
from tests.provisioning.wizard import url, walk

pytestmark = pytest.mark.django_db
CLOUD_PLATFORM = "https://www.googleapis.com/auth/cloud-platform"


@pytest.fixture
def serial_port(gce):
    """GET of one instance's serialPort in the fake, as the SDK would send it."""
    key = service_account_key(gce, email="zopday@zopday-sandbox.iam.gserviceaccount.com")
    credentials = service_account.Credentials.from_service_account_info(
        key, scopes=[CLOUD_PLATFORM]
    )
    session = AuthorizedSession(credentials)

    def get(name: str, **query: object) -> requests.Response:
        url = f"{gce.url}/compute/v1/projects/zopday-sandbox/zones/us-central1-a/instances/{name}"
        return session.get(f"{url}/serialPort", params={"port": 1, **query}, timeout=10)

    return get


@pytest.fixture
def vm(gcp, make_gcp_job):
    """One landed GCP VM: its console instance and its name in GCE."""
    job = job_run_inline(make_gcp_job(instance_count=1).pk)
    assert job.status == JobStatus.READY, job.message
    [instance] = instances_of(job)
    [record] = InfraConfig.from_json(job.config).vms
    return instance, record.instance_id


def poll(client, instance, start=0):
    return client.get(f"/projects/alpha/instances/{instance.pk}/serial-output/?start={start}")


def test_the_fake_serves_serial_output_from_an_offset_and_keeps_the_last_bytes(
    gcp, vm, serial_port
):
    _, name = vm
    boot = BOOT_LINES.format(name=name).encode()
    first = serial_port(name).json()
    assert first["kind"] == "compute#serialPortOutput"
    assert first["selfLink"].endswith(f"/instances/{name}/serialPort")
    assert (first["contents"], int(first["start"]), int(first["next"])) == (
        boot.decode(),
        0,
        len(boot),
    )
    gcp.append_serial(name, "hello\r\n")
    later = serial_port(name, start=first["next"]).json()
    assert later["contents"] == "hello\r\n" and int(later["next"]) == len(boot) + 7
    gcp.configure(serial_keep_bytes=10)
    gcp.append_serial(name, "0123456789abcdef")
    total = len(boot) + 7 + 16
    truncated = serial_port(name, start=3).json()  # older than what is kept: from the oldest
    assert truncated["contents"] == "6789abcdef"
    assert (int(truncated["start"]), int(truncated["next"])) == (total - 10, total)
    assert serial_port("no-such-vm").status_code == 404
    gcp.configure(serial_denied=True)
    denied = serial_port(name)
    assert denied.status_code == 403
    assert "compute.instances.getSerialPortOutput" in denied.json()["error"]["message"]


def test_a_gcp_vms_page_shows_its_serial_output_and_the_poll_only_new_text(gcp, vm, client_for):
    instance, name = vm
    client = client_for("viewer")  # reading is a viewer's right
    page = client.get(f"/projects/alpha/instances/{instance.pk}/").content.decode()
    assert "Serial output" in page
    assert "Live serial output through the Compute API (read-only)." in page
    assert "run this in your own terminal as your Google identity" in page
    assert f"gcloud compute ssh {name} --zone us-central1-a" in page
    assert f"/instances/{instance.pk}/serial-output/?start=0" in page
    first = poll(client, instance)
    assert first.status_code == 200
    html = first.content.decode()
    assert "login:" in html and 'hx-swap-oob="beforeend:#serial-text"' in html
    boot = len(BOOT_LINES.format(name=name).encode())
    assert f"serial-output/?start={boot}" in html and "every 2s" in html
    assert "login:" not in poll(client, instance, boot).content.decode()  # nothing new yet
    gcp.append_serial(name, "zop-42\r\n")
    later = poll(client, instance, boot).content.decode()
    assert "zop-42" in later and "login:" not in later
    assert f"serial-output/?start={boot + 8}" in later


def test_guest_output_is_escaped(gcp, vm, client_for):
    instance, name = vm
    gcp.append_serial(name, "<script>alert(1)</script>\r\n")
    html = poll(client_for("viewer"), instance).content.decode()
    assert "<script>alert" not in html and "&lt;script&gt;alert(1)&lt;/script&gt;" in html


def test_an_outsider_gets_404_and_get_changes_nothing(gcp, vm, client_for):
    instance, _ = vm
    assert poll(client_for("outsider"), instance).status_code == 404
    before = gcp.state()["operations"]
    poll(client_for("viewer"), instance)
    assert gcp.state()["operations"] == before


def test_iam_denial_names_the_permission_and_the_service_account_and_stops(gcp, vm, client_for):
    instance, _ = vm
    gcp.configure(serial_denied=True)
    answer = poll(client_for("viewer"), instance)
    assert answer.status_code == 286  # nothing polls a refusal every two seconds
    html = answer.content.decode()
    assert "lacks the IAM permission compute.instances.getSerialPortOutput" in html
    assert "service account zopday@zopday-sandbox.iam.gserviceaccount.com" in html


def test_a_stopped_vm_stops_the_polling(gcp, vm, client_for):
    instance, _ = vm
    Instance.objects.filter(pk=instance.pk).update(power_state=PowerState.STOPPED)
    answer = poll(client_for("viewer"), instance)
    assert answer.status_code == 286
    assert "The instance is stopped" in answer.content.decode()


def test_a_vm_gce_no_longer_knows_says_so(gcp, vm, client_for):
    instance, name = vm
    gcp.reset()  # the VM is gone behind the console's back
    html = poll(client_for("viewer"), instance).content.decode()
    assert f"GCE has no instance {name} in us-central1-a any more" in html


def test_the_azure_exec_channel_is_gated_with_the_provisioning_message():
    azure = CLOUDS["azure"]
    assert "AzureRunCmd" in azure.refusal and "not yet GA" in azure.refusal
    config = InfraConfig(provider="aws", instance_type="t3.micro", exec_mode="AzureRunCmd")
    assert machine_errors(config)["exec_mode"] == azure.refusal


def test_the_wizards_exec_channel_choice_says_azures_gate(client_for, account):
    client = client_for("operator")
    walk(client, account, until="machine")
    page = client.get(url("machine")).content.decode()
    assert '<option value="AzureRunCmd">AzureRunCmd (Azure, gated)</option>' in page
    machine = {"instance_type": "t3.micro", "disk_gb": "20", "bootstrap_mode": "default",
               "exec_mode": "AzureRunCmd", "action": "next"}  # fmt: skip
    page = client.post(url("machine"), machine).content.decode()
    assert "The Azure exec channel (AzureRunCmd) is gated on GA too" in page
