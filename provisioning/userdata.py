"""The cloud-init user data every provisioned VM runs, on every cloud.

It installs and starts Docker (dnf or apt), creates the `nginx-on-zop-net` network, runs NGINX
on it for the health check (not on "Bare metal"), then writes the sentinel stepCreateVMs polls
for (`Cloud.bootstrap_commands` may follow). No SSH key is placed and password logins stay off:
the only interactive access is the cloud's IAM-gated exec channel.
"""

import shlex

import yaml

from provisioning.choices import BootstrapMode
from provisioning.clouds import cloud_for
from provisioning.infra import InfraConfig

NETWORK = "nginx-on-zop-net"
NGINX_IMAGE = "nginx:stable"
NGINX_CONF_PATH = "/etc/zopday/nginx/default.conf"

INSTALL_DOCKER = (
    "command -v docker >/dev/null 2>&1 || "
    "{ if command -v dnf >/dev/null 2>&1; then dnf install -y docker; "
    "else apt-get update && DEBIAN_FRONTEND=noninteractive apt-get install -y docker.io; fi; }"
)


def nginx_conf(health_path: str) -> str:
    """The VMs' NGINX server; the path (checked as a URL path) is written as a quoted string."""
    quoted = '"' + health_path.replace("\\", "\\\\").replace('"', '\\"') + '"'
    return (
        "server {\n"
        "    listen 80 default_server;\n"
        f'    location = {quoted} {{ access_log off; return 200 "ok\\n"; }}\n'
        "    location / { return 404; }\n"
        "}\n"
    )


def user_data(config: InfraConfig) -> str:
    """The #cloud-config document for the job's bootstrap mode."""
    sentinel = config.sentinel_path
    sentinel_dir = sentinel.rsplit("/", 1)[0]
    commands: list[str | list[str]] = [
        ["sh", "-c", INSTALL_DOCKER],
        ["systemctl", "enable", "--now", "docker"],
        [
            "sh",
            "-c",
            f"docker network inspect {NETWORK} >/dev/null 2>&1 || "
            f"docker network create --driver bridge {NETWORK}",
        ],
    ]
    files = []
    if config.bootstrap_mode != BootstrapMode.BARE_METAL:
        files.append(
            {
                "path": NGINX_CONF_PATH,
                "permissions": "0644",
                "content": nginx_conf(config.health_check_path),
            }
        )
        run_nginx = (
            "docker rm -f zop-nginx >/dev/null 2>&1; "
            f"docker run -d --name zop-nginx --restart unless-stopped --network {NETWORK} "
            f"-p {config.health_check_port}:80 "
            f"-v {NGINX_CONF_PATH}:/etc/nginx/conf.d/default.conf:ro {NGINX_IMAGE}"
        )
        commands.append(["sh", "-c", run_nginx])
    commands.append(
        [
            "sh",
            "-c",
            f"mkdir -p {shlex.quote(sentinel_dir)} && date -u +%FT%TZ > {shlex.quote(sentinel)}",
        ]
    )
    commands += cloud_for(config.provider).bootstrap_commands(sentinel)
    document: dict[str, object] = {
        "ssh_pwauth": False,
        "disable_root": True,
        "package_update": True,
    }
    if files:
        document["write_files"] = files
    document["runcmd"] = commands
    return "#cloud-config\n" + yaml.safe_dump(document, sort_keys=False, width=1000)
