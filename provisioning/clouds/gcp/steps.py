"""The GCP pipeline calls: a VPC network with Cloud NAT, a service account, an instance
template, instances or a regional MIG, and an optional global Application Load Balancer."""

from provisioning.clouds.gcp.lb import GcpLoadBalancer
from provisioning.clouds.gcp.machines import GcpMachines
from provisioning.clouds.gcp.network import GcpNetwork
from provisioning.clouds.gcp.vms import GcpVms


class GcpSteps(GcpMachines, GcpNetwork, GcpVms, GcpLoadBalancer):
    """Every step's GCP calls for one account and region (`clouds.base.CloudSteps`): names are
    deterministic, so a 409 on insert means an earlier attempt made the resource."""
