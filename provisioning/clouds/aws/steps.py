"""The AWS pipeline calls: VPC + NAT, IAM for SSM, a launch template, instances or an ASG, and
an optional ALB with a target group, a listener and a Route 53 record."""

from provisioning.clouds.aws.lb import AwsLoadBalancer
from provisioning.clouds.aws.machines import AwsMachines
from provisioning.clouds.aws.network import AwsNetwork
from provisioning.clouds.aws.vms import AwsVms


class AwsSteps(AwsMachines, AwsNetwork, AwsVms, AwsLoadBalancer):
    """Every step's AWS calls for one account and region (`clouds.base.CloudSteps`)."""
