"""The test moto server keeps the managed IAM policies the product attaches."""

from provisioning.clouds.aws.machines import SSM_POLICY_ARN
from tests.provisioning.moto import raw_client
from tests.provisioning.moto_server import PRODUCT_POLICIES


def test_the_managed_policies_the_product_attaches_are_kept(aws):
    assert SSM_POLICY_ARN.rsplit("/", 1)[1] in PRODUCT_POLICIES
    iam = raw_client(aws, "iam")
    assert iam.get_policy(PolicyArn=SSM_POLICY_ARN)["Policy"]["PolicyName"] == (
        "AmazonSSMManagedInstanceCore"
    )
    # and only those: a reset rebuilds this catalogue, six times over
    listed = iam.list_policies(Scope="AWS", MaxItems=1000)["Policies"]
    assert [policy["PolicyName"] for policy in listed] == sorted(PRODUCT_POLICIES)
