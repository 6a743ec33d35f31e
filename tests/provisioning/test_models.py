import pytest
from django.core.management import call_command

from provisioning.models import CloudAccount
from provisioning.prices import estimate

pytestmark = pytest.mark.django_db


def test_the_secret_is_encrypted_at_rest(project):
    account = CloudAccount(project=project, name="x", access_key_id="AKIA")
    account.secret_access_key = "very-secret"
    account.save()
    stored = CloudAccount.objects.values_list("secret_access_key_encrypted", flat=True).get()
    assert "very-secret" not in stored and stored.startswith("gAAAA")
    assert CloudAccount.objects.get().secret_access_key == "very-secret"


def test_the_cost_follows_the_seeds_formula():
    cost = estimate(instance_type="t3.micro", count=10, disk_gb=20, load_balancer=True, nat=True)
    assert cost.instances == round(0.0104 * 10 * 730, 2)
    assert cost.storage == 16.0 and cost.load_balancer == round(0.0225 * 730, 2)
    assert cost.nat == round(0.045 * 730 + 0.045 * 10 * 10, 2)
    assert cost.monthly == pytest.approx(
        cost.instances + cost.storage + cost.load_balancer + cost.nat
    )
    # weekday-only hours on a 10-instance dev pool save most of the instance cost
    assert 60 < 100 * (cost.instances - cost.scheduled_instances) / cost.instances < 70


def test_seed_sandbox_adds_the_sandbox_account_once(project, capsys):
    call_command("seed_sandbox", "--project", project.slug, "--endpoint", "http://127.0.0.1:5001")
    call_command("seed_sandbox", "--project", project.slug, "--endpoint", "http://127.0.0.1:5002")
    account = CloudAccount.objects.get()
    assert (account.name, account.sandbox, account.endpoint_url) == (
        "Sandbox AWS",
        True,
        "http://127.0.0.1:5002",
    )
    assert account.secret_access_key == "sandbox"
