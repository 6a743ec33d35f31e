"""What a GCP job will create, in the words of the wizard's review."""

from provisioning.choices import NetworkMode, PoolMode
from provisioning.clouds.base import instances_in_words
from provisioning.infra import InfraConfig


def plan(config: InfraConfig) -> list[str]:
    lines = []
    if config.network_mode == NetworkMode.NEW:
        lines += [
            f"VPC network with a private subnetwork (first /24 of {config.vpc_cidr})",
            "Cloud Router with Cloud NAT (egress only)",
        ]
    else:
        lines.append(
            f"nothing in {config.existing_vpc_id}: the VMs go to {config.existing_subnet_id}"
        )
    lines += [
        "service account for the VMs, with no roles (OS Config agent enabled)",
        "firewall rules: all ingress denied, but port 22 from IAP's proxies (exec through IAP "
        "with OS Login, no public SSH)",
        f"instance template: {config.instance_type}, {config.disk_gb} GB pd-balanced, "
        "Shielded VM, no SSH keys, no public IP, cloud-init user data",
    ]
    if config.pool_mode == PoolMode.FIXED:
        where = ", spread over the region's zones" if config.instance_count > 1 else ""
        lines.append(instances_in_words(config.instance_count) + where)
    else:
        scaler = (
            f", autoscaler min {config.asg_min}, max {config.asg_max}"
            if config.asg_min != config.asg_max
            else ""
        )
        lines.append(f"regional managed instance group (size {config.asg_desired}{scaler})")
    if config.load_balancer:
        lines += [
            "global external Application Load Balancer: a global address, a forwarding rule "
            "on port 80, a target HTTP proxy and a URL map",
            f"backend service with an HTTP health check (GET {config.health_check_path} on "
            f"{config.health_check_port}) over the VMs' instance group(s)",
            "firewall rule: Google's front ends and health checkers may reach port "
            f"{config.health_check_port}",
            f"Cloud DNS A record {config.dns_name}" if config.dns_name else "no DNS record",
        ]
    return lines
