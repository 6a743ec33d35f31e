"""The cloud registry: every cloud answers the one protocol, and providers are named only there."""

import ast
from pathlib import Path

import pytest

from instances.backends import backend_available
from provisioning import validation
from provisioning.clouds import (
    CLOUDS,
    DEFAULT,
    available,
    cloud_for,
    exec_mode_choices,
    provider_choices,
)  # fmt: skip
from provisioning.clouds.errors import CloudError
from provisioning.infra import InfraConfig
from provisioning.validation import provider_errors

SDKS = ("boto3", "botocore", "google", "azure")
PROVISIONING = Path(__file__).resolve().parents[3] / "provisioning"


def test_every_cloud_is_registered_under_its_providers_value():
    assert all(name == cloud.name for name, cloud in CLOUDS.items())
    assert provider_choices() == [("aws", "AWS"), ("gcp", "GCP"), ("azure", "Azure")]
    assert [mode for mode, _ in exec_mode_choices()] == ["SSM", "OSConfig", "AzureRunCmd"]


def test_an_unknown_provider_gets_the_default_clouds_rules_and_is_refused():
    assert cloud_for("nowhere") is DEFAULT
    assert provider_errors("nowhere") == {"provider": "Choose aws or gcp."}


def test_each_available_cloud_powers_its_vms_through_a_registered_backend():
    assert [cloud.name for cloud in available()] == ["aws", "gcp"]
    for cloud in available():
        assert backend_available(cloud.name)
        assert cloud.vm_backend().name == cloud.name


def test_azure_answers_every_pipeline_call_with_the_clean_invalid_stub():
    azure = CLOUDS["azure"]
    assert provider_errors("azure") == {"provider": azure.refusal}
    with pytest.raises(CloudError) as refused:
        azure.steps(None, "eastus").create_network(InfraConfig(), None)  # type: ignore[arg-type]
    assert (refused.value.code, refused.value.retryable) == ("Invalid", False)
    assert refused.value.message.startswith("Invalid: Azure VMSS provisioning is in preview")


@pytest.mark.parametrize("cloud", list(available()), ids=lambda cloud: cloud.name)
def test_each_cloud_plans_prices_and_checks_a_request_of_its_own(cloud):
    config = InfraConfig(
        provider=cloud.name, region=cloud.region_example,
        instance_type=cloud.prices.default_machine, exec_mode=cloud.exec_mode,
    )  # fmt: skip
    assert cloud.region_pattern.match(cloud.region_example)
    assert cloud.prices.default_machine in cloud.prices.machines
    assert any("instance" in line for line in cloud.plan(config))
    assert validation.image_errors(config) == {}


def _imported(path: Path) -> set[str]:
    found = set()
    for node in ast.walk(ast.parse(path.read_text())):
        if isinstance(node, ast.Import):
            found |= {alias.name.split(".")[0] for alias in node.names}
        elif isinstance(node, ast.ImportFrom) and node.module and not node.level:
            found.add(node.module.split(".")[0])
    return found


def test_cloud_sdks_are_imported_only_inside_their_cloud_packages():
    outside = [
        str(path.relative_to(PROVISIONING))
        for path in PROVISIONING.rglob("*.py")
        if len(path.relative_to(PROVISIONING).parts) < 3 or path.parts[-3] != "clouds"
        if _imported(path) & set(SDKS)
    ]
    assert outside == []


def test_no_module_outside_the_registry_compares_a_provider_with_a_cloud_name():
    names = {cloud.name for cloud in CLOUDS.values()}
    branches = []
    for path in PROVISIONING.rglob("*.py"):
        if "migrations" in path.parts:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Compare):
                texts = {c.value for c in ast.walk(node) if isinstance(c, ast.Constant)}
                members = {a.attr.lower() for a in ast.walk(node) if isinstance(a, ast.Attribute)}
                if texts & names or (members & names and "Provider" in ast.unparse(node)):
                    branches.append(f"{path.relative_to(PROVISIONING)}:{node.lineno}")
    assert branches == []
