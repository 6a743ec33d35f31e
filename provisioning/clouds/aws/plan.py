"""What an AWS job will create, in the words of the wizard's review."""

from provisioning.choices import NetworkMode, PoolMode
from provisioning.clouds.base import instances_in_words
from provisioning.infra import InfraConfig


def plan(config: InfraConfig) -> list[str]:
    lines = []
    if config.network_mode == NetworkMode.NEW:
        lines += [
            f"VPC {config.vpc_cidr}",
            "private subnet (the VMs) and two public subnets",
            "internet gateway, Elastic IP and NAT gateway (egress only)",
            "two route tables (public → IGW, private → NAT)",
        ]
    else:
        lines.append(
            f"nothing in {config.existing_vpc_id}: the VMs go to {config.existing_subnet_id}"
        )
    lines += [
        "IAM role + instance profile with AmazonSSMManagedInstanceCore (exec via SSM)",
        "security group with no inbound rules (no port 22)",
        f"launch template: {config.instance_type}, {config.disk_gb} GB gp3, no key pair, "
        "no public IP, cloud-init user data",
    ]
    if config.pool_mode == PoolMode.FIXED:
        lines.append(instances_in_words(config.instance_count))
    else:
        lines.append(
            f"auto scaling group (min {config.asg_min}, max {config.asg_max}, "
            f"desired {config.asg_desired})"
        )
    if config.load_balancer:
        lines += [
            "application load balancer + its security group (HTTP in; VMs accept it on "
            f"port {config.health_check_port} only)",
            f"target group (health check GET {config.health_check_path} on "
            f"{config.health_check_port})",
            "listener HTTP :80",
            f"Route 53 record {config.dns_name}" if config.dns_name else "no DNS record",
        ]
    return lines
