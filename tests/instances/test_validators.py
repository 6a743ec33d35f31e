"""Each validation rule says what to fix."""

import subprocess

import pytest
from django.core.exceptions import ValidationError

from instances.validators import (
    parse_cloud_config,
    parse_network,
    parse_ssh_public_key,
    validate_dns_label,
    validate_mac,
    validate_object_name,
)


def message(callable_, *args) -> str:
    with pytest.raises(ValidationError) as caught:
        callable_(*args)
    return " ".join(caught.value.messages)


def test_it_accepts_a_colon_separated_mac():
    validate_mac("52:54:00:12:34:56")


def test_it_rejects_hyphenated_mac_and_shows_the_colon_form():
    assert message(validate_mac, "52-54-00-12-34-56") == (
        "Use colon notation for MAC addresses: 52:54:00:12:34:56, not 52-54-00-12-34-56."
    )


def test_it_rejects_a_malformed_mac_with_an_example():
    assert "e.g. 52:54:00:12:34:56" in message(validate_mac, "52:54:00:12:34")


def test_it_rejects_the_all_zero_mac():
    assert message(validate_mac, "00:00:00:00:00:00") == (
        "00:00:00:00:00:00 is not a usable MAC address: leave the field empty for an "
        "automatic one, or enter one such as 52:54:00:12:34:56."
    )


def test_it_rejects_a_multicast_mac():
    assert "multicast" in message(validate_mac, "01:00:5e:00:00:01")


def test_it_rejects_hostnames_that_are_not_dns_labels():
    assert "lowercase letters, digits and hyphens" in message(validate_dns_label, "Web_1")
    validate_dns_label("web-1")


def test_a_cidr_with_host_bits_names_the_network_meant():
    assert (
        message(parse_network, "10.0.0.7/24", 4)
        == "10.0.0.7/24 has host bits set; did you mean 10.0.0.0/24?"
    )


def test_a_cidr_of_the_wrong_version_is_refused():
    assert message(parse_network, "fd00::/64", 4) == "fd00::/64 is not an IPv4 network."
    assert message(parse_network, "banana", 6) == (
        "Enter an IPv6 network in CIDR notation, e.g. fd00:10::/64."
    )
    assert message(parse_network, "10.0.0/33", 4) == (
        "Enter an IPv4 network in CIDR notation, e.g. 10.0.0.0/24."
    )


def test_an_ssh_key_gets_the_fingerprint_ssh_keygen_prints(tmp_path):
    subprocess.run(
        ["ssh-keygen", "-q", "-t", "ed25519", "-N", "", "-f", tmp_path / "k"], check=True
    )
    public = (tmp_path / "k.pub").read_text()
    expected = subprocess.run(
        ["ssh-keygen", "-lf", tmp_path / "k.pub"], capture_output=True, text=True, check=True
    ).stdout.split()[1]
    assert parse_ssh_public_key(public + "\n") == (public.strip(), expected)


def test_a_private_key_is_refused_with_a_warning():
    text = (
        "-----BEGIN OPENSSH PRIVATE KEY-----\nb3BlbnNzaC1rZXk=\n-----END OPENSSH PRIVATE KEY-----"
    )
    assert "This is a private key" in message(parse_ssh_public_key, text)


def test_several_ssh_keys_pasted_at_once_are_refused():
    pasted = (
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi a@desk\n"
        "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi b@lap\n"
    )
    assert message(parse_ssh_public_key, pasted) == (
        "This holds 2 keys: add them one at a time, each under its own name."
    )


def test_an_empty_ssh_key_asks_for_one():
    assert message(parse_ssh_public_key, " \n ") == "Paste an OpenSSH public key."


def test_garbage_is_not_an_ssh_key():
    assert "not a valid OpenSSH public key" in message(parse_ssh_public_key, "ssh-rsa AAAAnope me")


def test_custom_user_data_needs_the_cloud_config_header():
    assert message(parse_cloud_config, "packages: [nginx]") == (
        "Custom user data must start with the line #cloud-config."
    )


def test_invalid_yaml_says_where():
    text = "#cloud-config\npackages: [nginx\nruncmd: []\n"
    assert "is not valid YAML (line 3, column" in message(parse_cloud_config, text)


def test_cloud_config_must_be_a_mapping():
    assert "must be a YAML mapping" in message(parse_cloud_config, "#cloud-config\n- a\n- b\n")


@pytest.mark.parametrize(
    ("config", "mistakes"),
    [
        ("users: 5", "users must be a list of users (or the word default), not a number"),
        ("runcmd: reboot", "runcmd must be a list of commands, not text"),
        ("runcmd: [ls, {a: b}]", "each runcmd entry must be a command or a list of words, not a mapping"),
        ("write_files: [{content: x}]", "write_files entry 1 must be a mapping with a path"),
        ("package_update: yes please", "package_update must be true or false, not text"),
        ("hostname: [a]\npackages: nginx",
         "hostname must be a host name, not a list; packages must be a list of package names, not text"),
    ],
)  # fmt: skip
def test_the_shapes_of_common_cloud_config_keys_are_checked(config, mistakes):
    text = f"#cloud-config\n{config}\n"
    assert message(parse_cloud_config, text) == f"In the cloud-config, {mistakes}."


def test_well_shaped_cloud_config_keys_pass():
    text = (
        "#cloud-config\nusers: [default, {name: deploy}]\nruncmd: [ls, [echo, hi]]\n"
        "write_files: [{path: /etc/motd, content: hi}]\npackage_update: true\n"
        "ssh_pwauth: false\nhostname: web-1\nchpasswd: {expire: false}\nanything_else: 5\n"
    )
    assert parse_cloud_config(text)["users"] == ["default", {"name": "deploy"}]


def test_valid_cloud_config_parses():
    assert parse_cloud_config("#cloud-config\nruncmd: [ls]\n") == {"runcmd": ["ls"]}


@pytest.mark.parametrize(
    ("name", "said"),
    [
        ("ops/laptop", 'A name cannot contain "/" (it would break the object\'s links)'),
        ("ops\\laptop", 'A name cannot contain "\\"'),
        ("ops\nlaptop", "A name cannot contain control characters"),
        ("..", '".." cannot be a name'),
    ],
)
def test_object_names_that_break_links_are_refused_with_what_to_use(name, said):
    assert said in message(validate_object_name, name)


def test_names_of_keys_disks_and_images_are_refused_at_their_field_in_forms_api_and_manifests(
    db, client_for, api_for, project, owner, image_server
):
    import html

    from instances.manifests import ManifestInvalid, manifest_apply
    from instances.models import Disk, Image, ImageImport, SSHKey
    from tests.instances.manifests.test_kinds import KEY

    said = 'A name cannot contain "/"'
    page = client_for("operator").post(
        "/projects/alpha/ssh-keys/", {"name": "ops/laptop", "public_key": KEY}
    )
    error = page.content.decode().split('id="name-error">', 1)[1].split("</p>", 1)[0]
    assert said in html.unescape(error)
    api = api_for("operator")
    disk = api.post("/projects/alpha/disks", {"name": "data/1", "zone": "local-1a", "size_gb": 1})
    assert disk.status_code == 422 and said in disk.json()["errors"]["name"][0]
    image_server.serve("/a.qcow2", b"x")
    body = {"name": "ubuntu/24.04", "format": "qcow2", "url": image_server.url("/a.qcow2")}
    imported = api.post("/projects/alpha/image-imports", body)
    assert imported.status_code == 422 and said in imported.json()["errors"]["name"][0]
    assert image_server.routes["/a.qcow2"].requests == 0  # refused before the address is asked
    document = f"kind: SSHKey\nproject: alpha\nname: ops/laptop\nspec:\n  public_key: {KEY}\n"
    with pytest.raises(ManifestInvalid) as refused:
        manifest_apply(sources=[("keys.yaml", document)], actor=owner)
    assert [str(problem) for problem in refused.value.problems] == [
        f"keys.yaml:3 (ssh-key ops/laptop): name: {said} (it would break the object's links): "
        "use - instead."
    ]
    for model in (SSHKey, Disk, Image, ImageImport):
        assert not model.objects.exists()
