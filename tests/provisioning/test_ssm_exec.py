"""Exec on an AWS VM: the console proxy opens a Session Manager session with the job's account
and speaks the data channel to the Session Manager fake (tests/fakes/ssm), whose agent runs a
real shell; the faults the channel must survive or explain are the fake's knobs."""

import contextlib
import json

import pytest
from websockets.exceptions import ConnectionClosed

from instances.consoles.proxy import ConsoleProxy
from instances.models import AuditEvent, ConsoleSession
from tests.instances.consoles.conftest import (
    ORIGIN,
    issue_ticket,
    loop_thread,  # noqa: F401  (a fixture)
    open_console,
    served,
    wait_until,
)
from tests.provisioning.moto import raw_client
from tests.provisioning.vms import first_vm_of_landed_job

pytestmark = pytest.mark.django_db(transaction=True)


@pytest.fixture
def vm(ssm_account, project, owner):
    """A landed job's first VM, as an instance (its agent online at the fake)."""
    return first_vm_of_landed_job(project, ssm_account, owner)


@pytest.fixture
def proxy(loop_thread, settings, tmp_path):  # noqa: F811
    settings.RUN_DIR = tmp_path / "run"
    proxy = ConsoleProxy(allowed_origins=[ORIGIN], history_bytes=65536, linger=0)
    with served(proxy, loop_thread) as port:
        proxy.url = f"ws://127.0.0.1:{port}"
        yield proxy


def ec2_id(instance) -> str:
    return instance.job_link.job.config["vms"][0]["instance_id"]


def exec_console(proxy, instance, user):
    return open_console(
        proxy, instance, "exec", ticket=issue_ticket(user, instance, "exec"), cookie_user=user
    )


class Screen:
    """What one viewer's websocket was sent: terminal bytes and control messages."""

    def __init__(self, ws) -> None:
        self.ws, self.output, self.controls = ws, bytearray(), []

    def pump(self, timeout: float = 0.5) -> None:
        try:
            message = self.ws.recv(timeout=timeout)
        except TimeoutError:
            return
        if isinstance(message, bytes):
            self.output += message
        else:
            self.controls.append(json.loads(message))

    def until(self, predicate, what: str, timeout: float = 15):
        return wait_until(lambda: (self.pump(0.1), predicate())[1], what, timeout)

    def sees(self, text: bytes, timeout: float = 15) -> None:
        self.until(lambda: text in self.output, repr(text), timeout)

    def control(self, kind: str, timeout: float = 15) -> dict:
        def found():
            return next((c for c in self.controls if c["type"] == kind), None)

        return self.until(found, f"a {kind} message", timeout)

    def closed(self, timeout: float = 15) -> ConnectionClosed:
        def gone():
            try:
                self.pump(0.1)
            except ConnectionClosed as closed:
                return closed
            return None

        return wait_until(gone, "the close", timeout)


def test_an_operator_runs_a_command_in_the_vms_shell(ssm, proxy, vm, operator):
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        hello = screen.control("hello")
        assert hello["mine"] and hello["ends"] and not hello["read_only"]
        ws.send(json.dumps({"type": "resize", "cols": 120, "rows": 40}))
        ws.send(b"echo zop-$((6*7))\r")
        screen.sees(b"zop-42")
        (session,) = ssm.sessions.values()
        wait_until(lambda: (120, 40) in session.sizes, "the terminal size at the agent")
        ws.send(json.dumps({"type": "resize", "cols": 100, "rows": 30}))
        wait_until(lambda: session.sizes[-1] == (100, 30), "the new size at the agent")
        assert session.target == ec2_id(vm)
    # the last viewer left: the session is terminated at Session Manager
    wait_until(lambda: session.session_id in ssm.terminated, "TerminateSession")
    record = wait_until(
        lambda: ConsoleSession.objects.filter(ended_at__isnull=False).first(), "end"
    )
    assert (record.kind, record.username, record.read_only) == ("exec", "operator", False)
    assert AuditEvent.objects.filter(action="console.exec", actor=operator).exists()


@pytest.mark.parametrize(
    "fault, seen",
    [
        ({"reorder": True}, "early"),  # held back, then delivered in order
        ({"duplicate": True}, "duplicates"),  # acknowledged and dropped
        ({"drop_every": 3}, "early"),  # what came after a lost one waits for its resend
        ({"withhold_acks": 3}, "resent"),  # the console resends what was not acknowledged
    ],
    ids=["reordered", "duplicated", "dropped", "acks-withheld"],
)
def test_what_the_network_mixes_up_arrives_once_and_in_order(ssm, proxy, vm, operator, fault, seen):
    for name, value in fault.items():
        setattr(ssm.faults, name, value)
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        screen.control("hello")
        for number in range(5):  # five messages the agent must get once each, in order
            ws.send(f"echo line-{number}-$((1+{number}))\r".encode())
        screen.sees(b"line-4-5")
        (session,) = ssm.sessions.values()
        typed = bytes(session.input)
        assert typed.count(b"echo line-") == 5
        assert [typed.index(f"line-{n}-".encode()) for n in range(5)] == sorted(
            typed.index(f"line-{n}-".encode()) for n in range(5)
        )
        text = bytes(screen.output)
        outputs = [text.rindex(f"line-{n}-{n + 1}".encode()) for n in range(5)]
        assert outputs == sorted(outputs)  # the shell's answers, in the order it gave them
        (hub,) = proxy.hubs.hubs.values()
        assert hub.link.stats[seen] > 0, hub.link.stats  # the fault did happen


def test_an_agent_side_close_ends_the_session_for_its_viewers(ssm, proxy, vm, operator):
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        screen.control("hello")
        (session_id,) = ssm.sessions
        ssm.close_channel(session_id, "Session was terminated by the administrator.")
        closed = screen.control("closed")
        assert closed["reason"] == (
            "The session ended on the instance's side: Session was terminated by the administrator."
        )
        assert screen.closed().rcvd.code == 4411  # the page offers a new session, no retry


def test_typing_exit_ends_the_session(ssm, proxy, vm, operator):
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        screen.control("hello")
        ws.send(b"exit\r")
        assert "Exiting session" in screen.control("closed")["reason"]
        assert screen.closed().rcvd.code == 4411


def test_the_session_resumes_after_the_network_drops(ssm, proxy, vm, operator):
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        screen.control("hello")
        ws.send(b"export MARK=kept\r")
        (session_id,) = ssm.sessions
        ssm.cut_network(session_id)
        ws.send(b"echo mark-$MARK\r")  # the same shell, on a new websocket
        screen.sees(b"mark-kept")


def test_a_sandbox_accounts_session_reaches_the_double_on_loopback_under_the_egress_policy(
    ssm, proxy, vm, operator, settings
):
    # the product's default: loopback blocked for every account but the console's own sandbox
    settings.ZOPDAY_EGRESS_BLOCKED_NETWORKS = ["127.0.0.0/8", "::1/128", "169.254.0.0/16"]
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        screen.control("hello")
        ws.send(b"echo sandbox-$((2*3))\r")
        screen.sees(b"sandbox-6")


def test_the_keyboard_holder_ends_the_session_for_everyone(ssm, proxy, vm, operator, owner):
    with exec_console(proxy, vm, operator) as first, exec_console(proxy, vm, owner) as second:
        one, two = Screen(first), Screen(second)
        one.control("hello"), two.control("hello")
        second.send(json.dumps({"type": "end"}))  # not the holder: refused
        assert "keyboard holder" in two.control("error")["message"]
        first.send(json.dumps({"type": "end"}))
        assert one.control("closed")["reason"] == "operator ended the session."
        assert two.control("closed")["reason"] == "operator ended the session."
    (session_id,) = ssm.sessions
    wait_until(lambda: session_id in ssm.terminated, "TerminateSession")


@pytest.mark.parametrize(
    "setup, message",
    [
        (
            lambda ssm, vm: setattr(ssm, "deny", True),
            "AWS IAM denied ssm:StartSession on {id} to arn:aws:iam::123456789012:user/testing",
        ),
        (
            lambda ssm, vm: ssm.offline.add(ec2_id(vm)),
            "The SSM agent of {id} is ConnectionLost",
        ),
        (
            lambda ssm, vm: setattr(ssm, "require_kms", True),
            "This account's Session Manager preferences require KMS encryption",
        ),
    ],
    ids=["access-denied", "agent-offline", "kms-required"],
)
def test_a_session_aws_refuses_says_why(ssm, proxy, vm, operator, setup, message):
    setup(ssm, vm)
    with exec_console(proxy, vm, operator) as ws:
        screen = Screen(ws)
        error = screen.control("error")
        assert error["message"].startswith(message.format(id=ec2_id(vm))), error
        assert screen.closed().rcvd.code == 4411


def test_a_vm_without_an_instance_profile_says_so(ssm, moto_server, proxy, vm, operator):
    ec2 = raw_client(moto_server, "ec2")
    subnet = ec2.describe_subnets()["Subnets"][0]["SubnetId"]
    (bare,) = ec2.run_instances(ImageId="ami-12c6146b", MinCount=1, MaxCount=1, SubnetId=subnet)[
        "Instances"
    ]  # launched by hand, with no instance profile: the job's VM record now names it
    job = vm.job_link.job
    job.config["vms"][0]["instance_id"] = bare["InstanceId"]
    job.save(update_fields=["config"])
    with exec_console(proxy, vm, operator) as ws:
        error = Screen(ws).control("error")
    assert error["message"].startswith(f"{bare['InstanceId']} is not managed by SSM: it has no")


def test_no_byte_of_a_refused_ticket_reaches_session_manager(ssm, proxy, vm, operator, viewer):
    with open_console(proxy, vm, "exec", ticket="x" * 43, cookie_user=operator) as ws:
        with contextlib.suppress(ConnectionClosed):  # the refusal may have closed it already
            ws.send(b"echo nope\r")
        assert Screen(ws).closed().rcvd.code == 4403
    with pytest.raises(Exception, match="operator role"):
        issue_ticket(viewer, vm, "exec")
    assert ssm.sessions == {}
