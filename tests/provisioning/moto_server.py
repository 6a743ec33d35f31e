"""moto_server, with AWS's managed IAM policies cut down to the ones the product attaches.

moto builds its whole catalogue of managed policies (about 1,600, for each of six partitions)
again on every reset: about a second per test that uses the `aws` fixture. The server, its
HTTP API and every other service are moto's own, unchanged.

Run as `python -m tests.provisioning.moto_server -H 127.0.0.1 -p PORT` (moto_server's options).
"""

import json
import sys

import moto.iam.models
from moto.server import main

# provisioning.clouds.aws.machines.SSM_POLICY_ARN (test_moto_server checks they agree)
PRODUCT_POLICIES = {"AmazonSSMManagedInstanceCore"}


def trim_managed_policies() -> None:
    catalogue = json.loads(moto.iam.models.aws_managed_policies_data)
    kept = {name: policy for name, policy in catalogue.items() if name in PRODUCT_POLICIES}
    moto.iam.models.aws_managed_policies_data = json.dumps(kept)


if __name__ == "__main__":
    trim_managed_policies()
    sys.exit(main(sys.argv[1:]))
