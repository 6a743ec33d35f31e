"""The exec console of an EC2 VM: a Session Manager session started with the job's account,
opened by the console proxy as a data channel (ssm_channel). What AWS refuses is said so a user
can act on it: which action, which identity, which part of the VM's setup is missing."""

import asyncio
import re
from dataclasses import dataclass, field
from typing import Any

from botocore.exceptions import BotoCoreError, ClientError
from websockets.exceptions import InvalidHandshake, InvalidURI

from instances.consoles.bridges.links import Unavailable
from instances.egress import EgressRefused
from provisioning.clouds.aws.ssm_channel import ResumeRefused, SsmChannel, Stream

HANDSHAKE_SECONDS = 20
SSM_POLICY = "AmazonSSMManagedInstanceCore"
_DENIED_IDENTITY = re.compile(r"User: (\S+) is not authorized")


@dataclass(frozen=True)
class SsmConsole:
    """Where a VM's exec console is: its EC2 id and the account's ssm and ec2 clients;
    `sandbox`: the account is the console's own fake cloud, whose stream is on loopback."""

    instance_id: str
    region: str
    identity: str  # the account's role ARN, or "" for its access key's own identity
    ssm: Any = field(repr=False)
    ec2: Any = field(repr=False)
    sandbox: bool = False

    async def open_link(self, on_data: Any, on_closed: Any) -> SsmChannel:
        """Start a session and open its channel; Unavailable says why AWS would not."""
        started = await self._call("start_session", Target=self.instance_id)
        session_id = started["SessionId"]

        async def resume() -> Stream:
            try:
                answer = await asyncio.to_thread(self.ssm.resume_session, SessionId=session_id)
            except ClientError as error:
                raise ResumeRefused(await self._explained(error)) from error
            return Stream(answer["StreamUrl"], answer["TokenValue"])

        async def terminate() -> None:
            await asyncio.to_thread(self.ssm.terminate_session, SessionId=session_id)

        channel = SsmChannel(
            Stream(started["StreamUrl"], started["TokenValue"]),
            on_data=on_data,
            on_closed=on_closed,
            resume=resume,
            terminate=terminate,
            checked=not self.sandbox,
        )
        try:
            await channel.open()
        except EgressRefused as refused:
            await terminate()
            raise Unavailable(refused.message) from refused
        except (OSError, TimeoutError, InvalidHandshake, InvalidURI) as error:
            await terminate()
            raise Unavailable(
                f"Session Manager started session {session_id} but its data channel did not "
                f"open ({error})."
            ) from error
        await _handshake_done(channel)
        return channel

    async def _call(self, operation: str, **kwargs: Any) -> Any:
        try:
            return await asyncio.to_thread(getattr(self.ssm, operation), **kwargs)
        except ClientError as error:
            raise Unavailable(await self._explained(error)) from error
        except BotoCoreError as error:
            raise Unavailable(f"Cannot reach Session Manager in {self.region}: {error}") from error

    async def _explained(self, error: ClientError) -> str:
        details = error.response.get("Error", {})
        code, message = str(details.get("Code", "")), str(details.get("Message", ""))
        if code == "AccessDeniedException":
            return self._denied(message)
        if code in ("TargetNotConnected", "InvalidTarget"):
            return await asyncio.to_thread(self._not_managed)
        return f"Session Manager refused the session: {code}: {message}"

    def _denied(self, message: str) -> str:
        found = _DENIED_IDENTITY.search(message)
        who = found.group(1) if found else (self.identity or "the account's access key")
        return (
            f"AWS IAM denied ssm:StartSession on {self.instance_id} to {who}: allow that action "
            "on this instance in the identity's policy, then open Exec again."
        )

    def _not_managed(self) -> str:
        """Why Session Manager has no agent for the VM: offline, or no instance profile."""
        vm = self.instance_id
        try:
            info = self.ssm.describe_instance_information(
                Filters=[{"Key": "InstanceIds", "Values": [vm]}]
            )["InstanceInformationList"]
        except (ClientError, BotoCoreError):
            info = []
        if info:
            ping = info[0].get("PingStatus", "")
            seen = info[0].get("LastPingDateTime", "")
            return (
                f"The SSM agent of {vm} is {ping or 'not online'}"
                f"{f' (last seen {seen})' if seen else ''}: the VM may be stopped, or its agent "
                "not running or unable to reach the ssm and ssmmessages endpoints."
            )
        try:
            reservations = self.ec2.describe_instances(InstanceIds=[vm])["Reservations"]
            described = reservations[0]["Instances"][0] if reservations else {}
        except (ClientError, BotoCoreError, IndexError, KeyError):
            described = {}
        if described and not described.get("IamInstanceProfile") and not _from_template(described):
            return (
                f"{vm} is not managed by SSM: it has no instance profile. Attach one whose "
                f"role has the {SSM_POLICY} policy, then its agent registers within minutes."
            )
        return (
            f"{vm} is not managed by SSM yet: its agent has not registered (a VM that just "
            f"started takes a few minutes), or its instance profile's role lacks {SSM_POLICY}."
        )


async def _handshake_done(channel: SsmChannel) -> None:
    """Wait for the agent's handshake; Unavailable with the channel's reason if it ends first
    (a KMS requirement, an agent that closed the channel)."""
    waits = [
        asyncio.ensure_future(channel.handshaken.wait()),
        asyncio.ensure_future(channel.ended.wait()),
    ]
    try:
        await asyncio.wait(waits, timeout=HANDSHAKE_SECONDS, return_when=asyncio.FIRST_COMPLETED)
    finally:
        for wait in waits:
            wait.cancel()
    if channel.handshaken.is_set() and not channel.closed:
        return
    if not channel.closed:
        channel.reason = "The instance's SSM agent did not finish the handshake in time."
        channel.close()
    raise Unavailable(channel.reason or "The session ended before it began.")


def _from_template(described: dict) -> bool:
    """Launched from a launch template, which may give the profile (EC2 shows it as an
    IamInstanceProfile; not every EC2 double does)."""
    return any(tag.get("Key") == "aws:ec2launchtemplate:id" for tag in described.get("Tags", []))
