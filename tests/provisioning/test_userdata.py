import shutil
import subprocess

import pytest
import yaml

from provisioning.infra import InfraConfig, VmRecord
from provisioning.userdata import nginx_conf, user_data

CLOUD_INIT = shutil.which("cloud-init")


@pytest.mark.parametrize("mode", ["default", "bare-metal"])
def test_the_user_data_passes_the_real_cloud_init_schema_check(tmp_path, mode):
    assert CLOUD_INIT, "Debian's cloud-init is missing: bin/zop test installs it"
    path = tmp_path / "user-data"
    path.write_text(user_data(InfraConfig(bootstrap_mode=mode)))
    result = subprocess.run(
        [CLOUD_INIT, "schema", "--config-file", str(path)],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert "Valid cloud-config" in result.stdout


def test_the_default_bootstrap_installs_docker_the_network_nginx_and_the_sentinel():
    text = user_data(InfraConfig(health_check_path="/up", health_check_port=8080))
    assert text.startswith("#cloud-config\n")
    order = [text.index(s) for s in ("docker", "docker network create --driver bridge nginx-on-zop-net",
                                      "--network nginx-on-zop-net", "/var/lib/zopday/bootstrap-complete")]  # fmt: skip
    assert order == sorted(order)
    [conf] = yaml.safe_load(text)["write_files"]
    assert 'location = "/up" {' in conf["content"] and "-p 8080:80" in text
    assert "ssh_authorized_keys" not in text and "ssh_pwauth: false" in text


def test_bare_metal_keeps_docker_and_the_network_but_no_nginx():
    text = user_data(InfraConfig(bootstrap_mode="bare-metal"))
    assert "nginx-on-zop-net" in text and "bootstrap-complete" in text
    assert "nginx:stable" not in text and "zop-nginx" not in text


def test_infra_config_survives_json_and_ignores_unknown_keys():
    config = InfraConfig(instance_count=3, vms=[VmRecord(instance_id="i-1", state="ready")])
    data = config.to_json()
    data["field_from_the_future"] = 1
    assert InfraConfig.from_json(data) == config
    assert InfraConfig.from_json({}) == InfraConfig()


def test_the_health_check_path_is_written_into_the_nginx_config_as_a_quoted_string():
    conf = nginx_conf("/status/v1:ok@edge~%2F")
    assert 'location = "/status/v1:ok@edge~%2F" { access_log off;' in conf
    assert conf.count("{") == conf.count("}") == 3
