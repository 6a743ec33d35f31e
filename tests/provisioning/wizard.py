"""Walking the provisioning wizard with a test client, step by step."""

WIZARD = [
    ("provider", {"name": "shop", "provider": "aws"}),
    ("pool", {"region": "us-east-1", "pool_mode": "Fixed", "instance_count": "3", "asg_min": "1", "asg_max": "1", "asg_desired": "1"}),
    ("machine", {"instance_type": "t3.small", "disk_gb": "30", "bootstrap_mode": "default", "exec_mode": "SSM"}),
    ("network", {"network_mode": "new", "vpc_cidr": "10.42.0.0/16"}),
    ("load-balancer", {"load_balancer": "on", "health_check_path": "/healthz", "health_check_port": "80", "dns_name": "shop.example.com"}),
]  # fmt: skip


def url(step):
    return f"/projects/alpha/provisioning/new/{step}/"


def walk(client, account, until=None, name="shop"):
    for step, data in WIZARD:
        if step == until:
            return
        if step == "provider":
            data = {**data, "account": account.pk, "name": name}
        response = client.post(url(step), {**data, "action": "next"})
        assert response.status_code == 302, response.content.decode()[:2000]
