"""Bad manifests: each problem at its file, line and field path, with the API's message, and
nothing created."""

import pytest

from instances.models import AuditEvent, Disk, Instance, NetworkInterface
from tests.instances.manifests.conftest import MANIFEST
from tests.yaml_bombs import billion_laughs, nested

pytestmark = pytest.mark.django_db


def at(line: int) -> str:
    """Where a problem of web-1 is: the line of its field."""
    return f"instance.yaml:{line} (instance web-1)"


def api_body(subnet, image, **fields):
    body = {
        "name": "web-1",
        "zone": "local-1a",
        "root_image": image.pk,
        "root_size_gb": 2,
        "disks": [{"name": "web-1-data", "size_gb": 10}],
        "nics": [{"subnet": subnet.pk}],
    }
    return body | fields


def assert_nothing_created():
    assert not Instance.objects.exists()
    assert not Disk.objects.exists()
    assert not NetworkInterface.objects.exists()
    # the API client's token is the only event
    assert not AuditEvent.objects.exclude(action="api_token.create").exists()


def test_a_yaml_syntax_error_names_its_line_and_column(refused):
    refusal = refused(MANIFEST.replace("  root_size_gb: 2", "  root_size_gb: 2: 3"))
    assert refusal.problems == [
        "instance.yaml:7:18: Invalid YAML: mapping values are not allowed in this context."
    ]
    assert refusal.error == "Nothing was applied: 1 problem."
    assert_nothing_created()


def test_a_key_given_twice_is_refused_rather_than_overwritten(refused):
    refusal = refused(MANIFEST.replace("  root_size_gb: 2", "  root_size_gb: 2\n  root_size_gb: 3"))
    assert refusal.problems == [
        "instance.yaml:8:3: Invalid YAML: the key 'root_size_gb' is given twice."
    ]
    assert_nothing_created()


def test_unknown_fields_are_refused_wherever_they_are(refused):
    manifest = (
        MANIFEST.replace("kind: Instance", "kind: Instance\nlabels: {}")
        .replace("  zone:", "  run_stratgy: Always\n  zone:")
        .replace("{subnet: backend}", "{subnet: backend, vlan: 3}")
    )
    refusal = refused(manifest)
    assert refusal.problems == ["instance.yaml:2: labels: Extra inputs are not permitted"]
    refusal = refused(manifest.replace("labels: {}\n", ""))
    assert refusal.problems == [
        f"{at(12)}: nics-0-vlan: Extra inputs are not permitted",
        f"{at(5)}: run_stratgy: Extra inputs are not permitted",
    ]
    assert_nothing_created()


def test_wrong_types_get_the_apis_messages_at_the_apis_paths(refused, api, subnet, image):
    manifest = MANIFEST.replace("root_size_gb: 2", "root_size_gb: large").replace(
        "{subnet: backend}", "{subnet: backend, ipv4: [10.20.0.9]}"
    )
    refusal = refused(manifest)
    assert refusal.problems == [
        f"{at(7)}: root_size_gb: Input should be a valid integer, unable to parse string as an integer",
        f"{at(11)}: nics-0-ipv4: Input should be a valid string",
    ]
    body = api_body(
        subnet, image, root_size_gb="large", nics=[{"subnet": subnet.pk, "ipv4": ["10.20.0.9"]}]
    )
    errors = api.post("/projects/alpha/instances", body).json()["errors"]
    assert [
        f"{at({'root_size_gb': 7}.get(path, 11))}: {path}: {messages[0]}"
        for path, messages in errors.items()
    ] == refusal.problems
    assert_nothing_created()


def test_invalid_values_get_the_apis_messages(refused, api, subnet, image):
    refusal = refused(MANIFEST.replace("  zone:", "  run_strategy: Sometimes\n  zone:"))
    assert refusal.problems == [
        f"{at(5)}: run_strategy: Input should be 'Always', 'Manual', 'RerunOnFailure', 'Once' or 'Halted'"
    ]
    errors = api.post(
        "/projects/alpha/instances", api_body(subnet, image, run_strategy="Sometimes")
    ).json()["errors"]
    assert errors == {"run_strategy": [refusal.problems[0].split("run_strategy: ")[1]]}
    assert_nothing_created()


def test_values_the_services_refuse_get_their_messages_too(refused, api, subnet, image):
    refusal = refused(
        MANIFEST.replace("zone: local-1a", "zone: mars-1").replace(
            "{subnet: backend}", "{subnet: backend, mac: 52-54-00-12-34-56}"
        )
    )
    assert refusal.problems == [  # a wrong zone hides no other mistake
        f"{at(11)}: nics-0-mac: Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56.",
        f"{at(5)}: zone: Choose one of the zones: local-1a, local-1b.",
    ]
    body = api_body(subnet, image, zone="mars-1")
    assert api.post("/projects/alpha/instances", body).json()["errors"] == {
        "zone": ["Choose one of the zones: local-1a, local-1b."]
    }
    refusal = refused(
        MANIFEST.replace("{subnet: backend}", "{subnet: backend, mac: 52-54-00-12-34-56}")
    )
    assert refusal.problems == [
        f"{at(11)}: nics-0-mac: Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
    ]
    assert_nothing_created()


def test_a_document_must_say_what_it_is_and_where_it_goes(refused):
    refusal = refused("kind: Pod\nname: web-1\nspec: [zone]\n")
    assert refusal.problems == [
        "instance.yaml:1: project: Field required",
        "instance.yaml:3: spec: Input should be a valid dictionary",
        "instance.yaml:1: kind: Give one of the kinds Subnet, SSHKey, Image, Disk, Instance, "
        "ElasticIP, ProvisioningJob.",
    ]
    refusal = refused("- kind: Instance\n")
    assert refusal.problems == [
        "instance.yaml:1: A document is a mapping: kind, project, name and spec."
    ]


def test_an_empty_manifest_is_refused(refused):
    assert refused("# nothing yet\n").problems == [
        "instance.yaml: No documents: expected at least one, such as kind: Instance."
    ]


def test_the_name_is_given_once_at_the_top(refused):
    refusal = refused(MANIFEST.replace("  zone:", "  name: web-2\n  zone:"))
    assert refusal.problems == [
        f"{at(5)}: name: Give the name once, at the top of the document, not in spec."
    ]


def test_an_instance_declared_twice_is_refused(refused):
    refusal = refused(MANIFEST + "---\n" + MANIFEST)
    assert refusal.problems == [
        "instance.yaml:15 (instance web-1): name: web-1 is declared twice: also at "
        "instance.yaml:1 (instance web-1)."
    ]


def test_the_problems_of_every_document_are_reported_together(refused):
    second = MANIFEST.replace("web-1", "web-2").replace("root_size_gb: 2", "root_size_gb: x")
    third = MANIFEST.replace("web-1", "web-3").replace("  zone:", "  vcpus: many\n  zone:")
    refusal = refused(MANIFEST + "---\n" + second + "---\n" + third)
    assert refusal.problems == [
        "instance.yaml:19 (instance web-2): root_size_gb: Input should be a valid integer, unable to parse string as an integer",
        "instance.yaml:29 (instance web-3): vcpus: Input should be a valid integer, unable to parse string as an integer",
    ]
    assert refusal.error == "Nothing was applied: 2 problems."
    assert_nothing_created()


def test_a_billion_laughs_is_refused_at_its_first_alias(refused):
    # spec: on line 4, its ten keys after it: the first alias is on line 6, column 12
    refusal = refused(MANIFEST.replace("spec:\n", "spec:\n" + billion_laughs("  ")))
    assert refusal.problems == [
        "instance.yaml:6:12: Aliases (*l0) are not accepted: write the value out where it is used."
    ]
    assert refusal.error == "Nothing was applied: 1 problem."
    assert_nothing_created()


def test_nesting_ten_thousand_deep_is_a_message_at_its_line(refused):
    refusal = refused(MANIFEST.replace("spec:\n", f"spec:\n  labels: {nested()}\n"))
    assert len(refusal.problems) == 1
    assert refusal.problems[0].startswith("instance.yaml:5:") and refusal.problems[0].endswith(
        ": Lists and mappings nest over 64 levels deep here: keep to a few levels."
    )
    assert_nothing_created()


def test_only_problems_that_new_text_alone_mends_are_said_to_lie_in_the_text(project):
    """A synced repository's commit is not read again at each poll for those (gitops.sync)."""
    from instances.manifests.documents import documents_read
    from instances.manifests.errors import ManifestInvalid
    from instances.manifests.kinds import KINDS
    from tests.instances.manifests.test_vm_import import VM

    def in_the_text(text: str) -> bool:
        with pytest.raises(ManifestInvalid) as invalid:
            documents_read(sources=[("a.yaml", text)], kinds=KINDS)
        return invalid.value.in_the_text

    assert in_the_text(MANIFEST + "  bad: [\n")
    assert in_the_text(MANIFEST.replace("spec:\n", "spec:\n" + billion_laughs("  ")))
    assert in_the_text(MANIFEST.replace("kind: Instance", "kind: Nothing"))
    # a VM naming a project that may be made later
    assert not in_the_text(VM.replace("zopday.io/project: alpha", "zopday.io/project: later"))
