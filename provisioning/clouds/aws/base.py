"""What every AWS step shares: the account's clients, the job's tags, and the lookups that
find (by the job's tags) what an earlier attempt of a step made; a step's first attempt skips
them, since nothing can exist yet."""

from collections.abc import Callable, Sequence
from functools import partial
from typing import Any

from provisioning.clouds.aws.sdk import client_for, tag_list
from provisioning.clouds.context import StepContext
from provisioning.infra import InfraConfig
from provisioning.models import CloudAccount

# How long a teardown waits for a resource to go away (NAT gateways, load balancers, ASGs).
SETTLE_TIMEOUT = 900


class AwsBase:
    def __init__(self, account: CloudAccount, region: str) -> None:
        self.account = account
        self.region = region

    def client(self, service: str) -> Any:
        return client_for(self.account, service, self.region)

    def _tags(self, ctx: StepContext, role: str) -> dict[str, str]:
        return {**ctx.tags, "zopday:role": role, "Name": f"{ctx.name}-{role}"}

    def _spec(self, ctx: StepContext, resource_type: str, role: str) -> list[dict[str, Any]]:
        return [{"ResourceType": resource_type, "Tags": tag_list(self._tags(ctx, role))}]

    def _filters(self, ctx: StepContext, role: str | None = None) -> list[dict[str, Any]]:
        filters = [{"Name": "tag:zopday:token", "Values": [ctx.token]}]
        if role:
            filters.append({"Name": "tag:zopday:role", "Values": [role]})
        return filters

    def _existing(self, ctx: StepContext, find: Callable[[], Any]) -> Any:
        """What an earlier attempt of this step made, or None. On the step's first attempt
        nothing can exist yet, so the lookup (a describe or get call) is not made."""
        if ctx.first_attempt:
            return None
        return find()

    def _find_or_create(
        self,
        ctx: StepContext,
        find: Callable[[], Any],
        create: Callable[[], Any],
        made: Callable[[Any], str],
    ) -> Any:
        """The resource an earlier attempt made (`find`), or a new one from `create`, logged
        with `made`."""
        found = self._existing(ctx, find)
        if found is None:
            found = create()
            ctx.log(made(found))
        return found

    def _tagged(
        self, describe: Callable[..., Any], key: str, ctx: StepContext, role: str
    ) -> Callable[[], Any]:
        """A lookup of the job's resource of that role: the first one `describe` lists."""
        return partial(self._find_one, describe, key, ctx, role)

    def _record(self, config: InfraConfig, ctx: StepContext, kind: str, value: str) -> str:
        if config.resources.get(kind) != value:
            config.resources[kind] = value
            ctx.save()
        return value

    def _owned(
        self,
        describe: Callable[..., Any],
        key: str,
        ctx: StepContext,
        role: str | None = None,
        *,
        argument: str = "Filters",
        extra: Sequence[dict[str, Any]] = (),
    ) -> list[Any]:
        """The job's resources (of that role) that `describe` lists, filtered by their tags here
        too: a cloud that ignores a filter (moto's NAT gateways) must not hand the job another's.
        `argument`: the filter parameter's name (DescribeNatGateways calls it `Filter`)."""
        answer = describe(**{argument: [*self._filters(ctx, role), *extra]})[key]
        return [item for item in answer if carries_job_tags(item.get("Tags"), ctx, role)]

    def _find_one(
        self,
        describe: Callable[..., Any],
        key: str,
        ctx: StepContext,
        role: str | None = None,
        **kwargs: Any,
    ) -> Any:
        items = self._owned(describe, key, ctx, role, **kwargs)
        return items[0] if items else None

    def _ensure_security_group(
        self, config: InfraConfig, ctx: StepContext, role: str, suffix: str, description: str
    ) -> str:
        """The job's security group of that role: the one an earlier attempt made, or a new one
        in the job's VPC, tagged with the role."""
        group = self._existing(ctx, lambda: self._security_group(ctx, role))
        if group is not None:
            return str(group["GroupId"])
        group_id = str(
            self.client("ec2").create_security_group(
                GroupName=ctx.resource_name(suffix),
                Description=description,
                VpcId=config.resources["vpc"],
                TagSpecifications=self._spec(ctx, "security-group", role),
            )["GroupId"]
        )
        ctx.log(f"created security group {group_id} ({description})")
        return group_id

    def _security_group(self, ctx: StepContext, role: str) -> Any:
        return self._find_one(
            self.client("ec2").describe_security_groups, "SecurityGroups", ctx, role
        )


def carries_job_tags(tags: Any, ctx: StepContext, role: str | None = None) -> bool:
    """Whether a resource's tags (AWS's Key/Value list) are the job's (and of that role)."""
    found = {str(tag.get("Key")): str(tag.get("Value")) for tag in tags or []}
    return found.get("zopday:token") == ctx.token and (
        role is None or found.get("zopday:role") == role
    )
