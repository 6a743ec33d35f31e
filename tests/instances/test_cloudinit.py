"""The NoCloud seed of an instance's default configuration: what it says, checked by the real
cloud-init where it has a schema (the demo guest applies it in test_machines_integration)."""

import shutil
import subprocess

import pytest
import yaml

from instances.choices import UserDataMode
from instances.cloudinit import default_user_data, network_config, seed_for
from instances.services.instances import instance_create
from instances.services.keys import ssh_key_add
from tests.factories import SubnetFactory, instance_request

pytestmark = pytest.mark.django_db

CLOUD_INIT = shutil.which("cloud-init")
KEY = "ssh-ed25519 AAAAC3NzaC1lZDI1NTE5AAAAIFJ3qT4dDfUXXJ3KUWlIzjvVJYmiNNzWkCZ1y7ws7PZi ops@desk"


def test_the_default_configuration_passes_the_real_cloud_init_schema_check(
    tmp_path, project, operator, subnet
):
    assert CLOUD_INIT, "Debian's cloud-init is missing: bin/zop test installs it"
    key = ssh_key_add(project=project, actor=operator, name="desk", public_key=KEY)
    instance = instance_create(
        project=project, actor=operator, request=instance_request(subnet, ssh_keys=[key])
    )
    path = tmp_path / "user-data"
    path.write_text(default_user_data(instance))
    result = subprocess.run(
        [CLOUD_INIT, "schema", "--config-file", str(path)],
        capture_output=True, text=True, timeout=60,
    )  # fmt: skip
    assert result.returncode == 0, result.stdout + result.stderr
    config = yaml.safe_load(path.read_text())
    assert config["users"][0]["name"] == "spx" and config["users"][0]["sudo"]
    assert config["users"][0]["ssh_authorized_keys"] == [KEY]
    assert config["chpasswd"]["users"][0]["password"] == instance.initial_password
    assert config["chpasswd"]["expire"] is True  # one-time: changed at the first login


def test_custom_user_data_is_kept_and_the_selected_keys_go_in_the_meta_data(
    project, operator, subnet
):
    key = ssh_key_add(project=project, actor=operator, name="desk", public_key=KEY)
    custom = "#cloud-config\nusers: [default]\n"
    request = instance_request(
        subnet, ssh_keys=[key], user_data_mode=UserDataMode.CUSTOM, custom_user_data=custom
    )
    seed = seed_for(instance_create(project=project, actor=operator, request=request))
    assert seed.user_data == custom
    assert yaml.safe_load(seed.meta_data)["public-keys"] == [KEY]
    default = instance_create(
        project=project,
        actor=operator,
        request=instance_request(subnet, name="web-2", ssh_keys=[key]),
    )
    assert "public-keys" not in yaml.safe_load(seed_for(default).meta_data)  # in users: instead


def test_a_subnet_without_resolvers_gives_its_guests_the_consoles_default_ones(
    project, operator, settings
):
    settings.ZOPDAY_DNS_RESOLVERS = ["192.0.2.53", "192.0.2.54"]
    bare = SubnetFactory(project=project, name="bare", cidr_v4="10.40.0.0/24", dns_resolvers="")
    instance = instance_create(project=project, actor=operator, request=instance_request(bare))
    config = yaml.safe_load(default_user_data(instance))
    assert config["resolv_conf"] == {"nameservers": ["192.0.2.53", "192.0.2.54"]}
    eth0 = yaml.safe_load(network_config(instance))["ethernets"]["eth0"]
    assert eth0["nameservers"] == {"addresses": ["192.0.2.53", "192.0.2.54"]}


def test_a_subnets_own_resolvers_win(project, operator, subnet):
    instance = instance_create(project=project, actor=operator, request=instance_request(subnet))
    assert yaml.safe_load(default_user_data(instance))["resolv_conf"]["nameservers"] == [
        "10.0.0.53"
    ]


def test_the_subnet_list_says_which_resolvers_a_subnet_without_its_own_gives(
    client_for, project, settings
):
    settings.ZOPDAY_DNS_RESOLVERS = ["192.0.2.53"]
    SubnetFactory(project=project, name="bare", cidr_v4="10.40.0.0/24", dns_resolvers="")
    html = client_for("viewer").get("/projects/alpha/subnets/").content.decode()
    assert "default: 192.0.2.53" in html
