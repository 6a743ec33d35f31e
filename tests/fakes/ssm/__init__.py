"""A Session Manager double on loopback (moto has none): the API calls the console makes, in
front of a moto server that answers everything else, and the data channel, whose agent runs a
real shell. Which VMs are managed is read from moto as AWS decides it: a running instance whose
instance profile's role has AmazonSSMManagedInstanceCore.

    fake = SsmFake(upstream=moto_url, folder=tmp).start()   # fake.url: the account's endpoint
    fake.deny / fake.require_kms / fake.offline.add(id) / fake.faults.reorder = True
    fake.sessions[id].input, .sizes; fake.terminated; fake.close_channel(id, why); fake.cut_network(id)
"""

import asyncio
import json
import re
import secrets
import threading
import time
from http.server import ThreadingHTTPServer
from pathlib import Path

import boto3
from botocore.config import Config
from websockets.asyncio.server import ServerConnection, serve

from .agent import AgentSession, Faults
from .api import ACCOUNT, AwsError, FrontHandler

SSM_POLICY = "AmazonSSMManagedInstanceCore"
CHANNEL = re.compile(r"/v1/data-channel/(?P<session>[A-Za-z0-9_-]+)")

__all__ = ["AgentSession", "Faults", "SsmFake"]


class SsmFake:
    def __init__(self, *, upstream: str, folder: Path) -> None:
        self.upstream, self.folder = upstream, folder
        self.deny = False
        self.require_kms = False
        self.offline: set[str] = set()
        self.faults = Faults()
        self.sessions: dict[str, AgentSession] = {}
        self.terminated: list[str] = []
        self.loop = asyncio.new_event_loop()
        self._loop_thread = threading.Thread(target=self.loop.run_forever, daemon=True)

    # ---- running -----------------------------------------------------------------------

    def start(self) -> "SsmFake":
        handler = type("Handler", (FrontHandler,), {"fake": self})
        self.http = ThreadingHTTPServer(("127.0.0.1", 0), handler)
        self.http.daemon_threads = True
        threading.Thread(target=self.http.serve_forever, daemon=True).start()
        self.url = f"http://127.0.0.1:{self.http.server_address[1]}"
        self._loop_thread.start()
        self.channels = self._run(self._serve_channels())
        self.channel_url = f"ws://127.0.0.1:{self.channels.sockets[0].getsockname()[1]}"
        return self

    async def _serve_channels(self):  # type: ignore[no-untyped-def]
        return await serve(self._channel, "127.0.0.1", 0, compression=None, max_size=None)

    def _run(self, coroutine, timeout: float = 10):  # type: ignore[no-untyped-def]
        return asyncio.run_coroutine_threadsafe(coroutine, self.loop).result(timeout)

    def reset(self) -> None:
        """End every session and forget the knobs (between tests)."""
        for session in list(self.sessions.values()):
            self._run(session.end("The test ended."))
        self.sessions.clear()
        self.terminated.clear()
        self.deny = self.require_kms = False
        self.offline.clear()
        self.faults.__init__()  # type: ignore[misc]

    def stop(self) -> None:
        self.reset()
        self.http.shutdown()
        self.http.server_close()

        async def close() -> None:
            self.channels.close()
            await self.channels.wait_closed()

        self._run(close())
        self.loop.call_soon_threadsafe(self.loop.stop)
        self._loop_thread.join(5)

    # ---- what tests do to a session ------------------------------------------------------

    def close_channel(self, session_id: str, output: str) -> None:
        """The agent ends the session itself (channel_closed with this Output)."""
        self._run(self.sessions[session_id].end(output))

    def cut_network(self, session_id: str) -> None:
        self.loop.call_soon_threadsafe(self.sessions[session_id].cut)

    # ---- the data channel ----------------------------------------------------------------

    async def _channel(self, ws: ServerConnection) -> None:
        found = CHANNEL.fullmatch(ws.request.path.split("?")[0]) if ws.request else None
        session = self.sessions.get(found["session"]) if found else None
        try:
            opening = await asyncio.wait_for(ws.recv(), 10)
            token = json.loads(opening).get("TokenValue")
        except Exception:
            token = None
        if session is None or session.ended or not token or token != session.token:
            await ws.close(1008, "The token is not valid for this session.")
            return
        await session.serve(ws)

    # ---- the API (called from the HTTP front's threads) -----------------------------------

    def api_StartSession(self, body: dict, region: str) -> dict:
        target = str(body.get("Target", ""))
        if self.deny:
            raise AwsError(
                "AccessDeniedException",
                f"User: arn:aws:iam::{ACCOUNT}:user/testing is not authorized to perform: "
                f"ssm:StartSession on resource: arn:aws:ec2:{region}:{ACCOUNT}:instance/{target} "
                "because no identity-based policy allows the ssm:StartSession action",
            )
        if not self._managed(target, region) or target in self.offline:
            raise AwsError("TargetNotConnected", f"{target} is not connected.")
        session_id = f"testing-{secrets.token_hex(8)}"
        session = AgentSession(
            session_id=session_id, target=target, token="", folder=self.folder / session_id,
            faults=self.faults, require_kms=self.require_kms,
        )  # fmt: skip
        self.sessions[session_id] = session
        return self._stream(session)

    def api_ResumeSession(self, body: dict, region: str) -> dict:
        session = self.sessions.get(str(body.get("SessionId", "")))
        if session is None or session.ended:
            raise AwsError("DoesNotExistException", "The session does not exist or has ended.")
        return self._stream(session)

    def api_TerminateSession(self, body: dict, region: str) -> dict:
        session_id = str(body.get("SessionId", ""))
        session = self.sessions.get(session_id)
        if session is not None:
            self.terminated.append(session_id)
            self._run(session.end(f"Session {session_id} was terminated."))
        return {"SessionId": session_id}

    def api_DescribeInstanceInformation(self, body: dict, region: str) -> dict:
        wanted = [
            value
            for item in body.get("Filters", []) if item.get("Key") == "InstanceIds"
            for value in item.get("Values", [])
        ]  # fmt: skip
        listed = []
        for target in wanted:
            if self._managed(target, region):
                offline = target in self.offline
                listed.append({
                    "InstanceId": target, "PlatformType": "Linux", "AgentVersion": "3.3.0.0",
                    "PingStatus": "ConnectionLost" if offline else "Online",
                    "LastPingDateTime": time.time() - (3600 if offline else 5),
                })  # fmt: skip
        return {"InstanceInformationList": listed}

    def _stream(self, session: AgentSession) -> dict:
        return {
            "SessionId": session.session_id,
            "TokenValue": session.new_token(),
            "StreamUrl": f"{self.channel_url}/v1/data-channel/{session.session_id}"
            "?role=publish_subscribe",
        }

    def _managed(self, target: str, region: str) -> bool:
        """Running, with an instance profile whose role has the SSM policy (asked of moto)."""
        ec2, iam = self._client("ec2", region), self._client("iam", region)
        try:
            reservations = ec2.describe_instances(InstanceIds=[target])["Reservations"]
        except Exception:
            return False
        described = reservations[0]["Instances"][0] if reservations else {}
        profile = self._profile_of(described, ec2)
        if described.get("State", {}).get("Name") != "running" or not profile:
            return False
        roles = iam.get_instance_profile(InstanceProfileName=profile)
        for role in roles["InstanceProfile"]["Roles"]:
            attached = iam.list_attached_role_policies(RoleName=role["RoleName"])
            if any(p["PolicyName"] == SSM_POLICY for p in attached["AttachedPolicies"]):
                return True
        return False

    @staticmethod
    def _profile_of(described: dict, ec2) -> str:  # type: ignore[no-untyped-def]
        """The instance profile's name; moto leaves out the one EC2 takes from the launch
        template an instance was launched with, so it is read from the template."""
        arn = described.get("IamInstanceProfile", {}).get("Arn", "")
        if arn:
            return str(arn.rsplit("/", 1)[-1])
        tags = {tag["Key"]: tag["Value"] for tag in described.get("Tags", [])}
        template = tags.get("aws:ec2launchtemplate:id")
        if not template:
            return ""
        versions = ec2.describe_launch_template_versions(
            LaunchTemplateId=template,
            Versions=[tags.get("aws:ec2launchtemplate:version", "$Latest")],
        )["LaunchTemplateVersions"]
        data = versions[0]["LaunchTemplateData"] if versions else {}
        return str(data.get("IamInstanceProfile", {}).get("Name", ""))

    def _client(self, service: str, region: str):  # type: ignore[no-untyped-def]
        return boto3.client(
            service, endpoint_url=self.upstream, region_name=region,
            aws_access_key_id="testing", aws_secret_access_key="testing",
            config=Config(retries={"max_attempts": 1}),
        )  # fmt: skip
