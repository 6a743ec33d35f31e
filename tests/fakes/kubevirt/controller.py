"""virt-controller and virt-handler, as far as the console depends on them: a VirtualMachine's
runStrategy decides whether its VirtualMachineInstance exists; the start, stop and restart
subresources act as KubeVirt's do (the user guide's run strategies table); a VMI is scheduled on
a node of its zone with room for it and runs as a real QEMU guest through the project's QEMU
backend, one backend folder per node; the VMI's phase and the VM's printableStatus follow what
the guest does (a power-off inside it Succeeds the VMI, a crash Fails it).

DataVolumes are populated by the fake's CDI (cdi.py); a VMI is made only once its VM's
DataVolumes have Succeeded (the VM is Provisioning meanwhile, DataVolumeError when an import
fails). Live migrations are migrations.py's. Where it stops: one reconcile thread for every object."""

import base64
import contextlib
import copy
import json
import threading
import time
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from instances.backends.base import (
    BackendError,
    CloudInitSeed,
    DiskSpec,
    ExitKind,
    FirmwareSpec,
    MachineSpec,
    NicSpec,
    Power,
)
from instances.backends.qemu import QemuBackend
from instances.backends.qemu.run_folder import RunFolder
from instances.containerdisks import cache
from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import parse_reference
from instances.containerdisks.skopeo import Access, plain_http
from tests.fakes.kubevirt.agent import AgentRelay
from tests.fakes.kubevirt.cdi import Cdi
from tests.fakes.kubevirt.expansion import Expansion
from tests.fakes.kubevirt.live import LiveUpdates
from tests.fakes.kubevirt.migrations import Migrations
from tests.fakes.kubevirt.snapshots import Snapshots
from tests.fakes.kubevirt.store import BY_KIND, ApiError, Body
from tests.fakes.kubevirt.vm_state import BackendStorage

VM, VMI = BY_KIND["VirtualMachine"], BY_KIND["VirtualMachineInstance"]
DATA_VOLUME, SECRET = BY_KIND["DataVolume"], BY_KIND["Secret"]
NODE, NAD = BY_KIND["Node"], BY_KIND["NetworkAttachmentDefinition"]
FINISHED = ("Succeeded", "Failed")
# runStrategy → what start, stop and restart change it to (None: unchanged)
STRATEGY_AFTER = {
    "Always": {"start": None, "stop": "Halted", "restart": None},
    "Halted": {"start": "Always", "stop": None, "restart": "Always"},
    "Once": {"start": None, "stop": "Halted", "restart": None},
    "Manual": {"start": None, "stop": None, "restart": None},
    "RerunOnFailure": {"start": None, "stop": None, "restart": None},
}
GRACE_SECONDS = 30  # a VMI's terminationGracePeriodSeconds when it names none


def _quantity_mb(value: str | int) -> int:
    text = str(value)
    for suffix, factor in (("Ki", 1 / 1024), ("Mi", 1), ("Gi", 1024), ("Ti", 1024 * 1024)):
        if text.endswith(suffix):
            return int(float(text[: -len(suffix)]) * factor)
    return int(float(text) / (1024 * 1024))


@dataclass
class Stopping:
    """A VMI being deleted: by when its guest must be off before the power is cut."""

    deadline: float
    forced: bool = False


class Controller:
    """Reconciles every VM and VMI of the fake's store on its own thread."""

    def __init__(self, api: Any, root: Path, registry: dict[str, Path], netns: str = "") -> None:
        self.api, self.store = api, api.store
        self.netns = netns  # where the nodes' bridges are (Multus's bridge CNI); "": user-mode
        self.registry = registry  # OCI reference → the folder its image holds (a kernel image)
        self.nodes: dict[str, QemuBackend] = {}
        self.root = root
        self.cdi = Cdi(self.store, root)
        self.vm_state = BackendStorage(root / "vm-state")
        self.stopping: dict[tuple[str, str], Stopping] = {}
        # what virt-controller remembers of a VM: stopped by request or by its guest ("off")
        self.notes: dict[tuple[str, str], dict[str, bool]] = {}
        self.lock = threading.Lock()
        self.passes = 0  # reconcile passes done, for tests that wait for the controller to act
        self.passed = threading.Condition()
        for action in ("start", "stop", "restart"):
            api.actions[("virtualmachines", action)] = self._action(action)
        api.actions[("virtualmachineinstances", "softreboot")] = self._soft_reboot
        api.deletions["VirtualMachineInstance"] = self._deleted
        api.streams[("virtualmachineinstances", "console")] = self._console("serial")
        api.streams[("virtualmachineinstances", "vnc")] = self._console("vnc")
        self.agent, self.live = AgentRelay(self), LiveUpdates(self)  # agent.py, live.py
        self.snapshots, self.expansion = Snapshots(self), Expansion(self)
        self.migrations = Migrations(self)
        self.closing = threading.Event()
        self.thread = threading.Thread(target=self._loop, daemon=True)
        self.thread.start()

    def node_backend(self, node: str) -> QemuBackend:
        if node not in self.nodes:  # the nodes share one disk folder, as RWX storage
            (self.root / "disks").mkdir(parents=True, exist_ok=True)
            (self.root / node).mkdir(exist_ok=True)
            if not (self.root / node / "disks").exists():
                (self.root / node / "disks").symlink_to(self.root / "disks")
            self.nodes[node] = QemuBackend(
                self.root / node,
                network_mode="bridge" if self.netns else "user",
                namespace=self.netns or "zopday",
                network_lock=self.root / ".network.lock",
            )
        return self.nodes[node]

    def stop(self) -> None:
        self.closing.set()
        self.thread.join(10)
        self.cdi.stop()
        for backend in self.nodes.values():
            for machine_id in backend.running_machines():
                backend.force_stop(machine_id)

    # ---- subresources ------------------------------------------------------------------------
    def _action(self, action: str):
        def act(namespace: str, name: str, body: Body) -> None:
            with self.lock:
                vm = self.store.get(VM, namespace, name)
                strategy = vm["spec"].get("runStrategy", "Halted")
                vmi = self.store.find(VMI, namespace, name)
                if action == "start" and vmi and vmi.get("status", {}).get("phase") == "Running":
                    raise ApiError(409, "Conflict", "VM is already running")
                if action == "start" and strategy in ("Always", "Once"):
                    raise ApiError(
                        409, "Conflict", f"{strategy} does not support manual start requests"
                    )
                if action == "stop" and vmi is None and strategy in ("Halted", "Manual"):
                    raise ApiError(409, "Conflict", "VM is not running")
                after = STRATEGY_AFTER.get(strategy, {}).get(action)
                if after is not None:
                    vm["spec"]["runStrategy"] = after
                    vm = self.store.replace(VM, namespace, vm, status=False)
                requests = []
                if action in ("stop", "restart") and vmi is not None:
                    self._delete_vmi(vmi, grace=body.get("gracePeriod"))
                if action in ("start", "restart") and strategy in ("Manual", "RerunOnFailure"):
                    requests.append({"action": "Start"})
                if action == "stop" and strategy in ("Manual", "RerunOnFailure"):
                    requests.append({"action": "Stop"})
                if requests:
                    vm["status"] = {**vm.get("status", {}), "stateChangeRequests": requests}
                    self.store.replace(VM, namespace, vm, status=True)
            self._wake()

        return act

    def _deleted(self, namespace: str, name: str) -> Body:
        """A DELETE of a VMI: its launcher pod ends (gracefully while the guest runs), then the
        VMI goes; its VM's controller decides whether a new one runs."""
        with self.lock:
            vmi = self.store.get(VMI, namespace, name)
            self._delete_vmi(vmi)
        self._wake()
        return vmi

    def _soft_reboot(self, namespace: str, name: str, body: Body) -> None:
        vmi = self.store.get(VMI, namespace, name)
        node = vmi.get("status", {}).get("nodeName")
        if vmi.get("status", {}).get("phase") != "Running" or not node:
            raise ApiError(409, "Conflict", "VMI is not running")
        self.node_backend(node).restart(self._machine_id(vmi))

    def _console(self, kind: str):
        """The guest's console socket on its node, as virt-handler reaches it for virt-api."""

        def socket_of(namespace: str, name: str) -> Path:
            vmi = self.store.get(VMI, namespace, name)
            status = vmi.get("status", {})
            if status.get("phase") != "Running" or not status.get("nodeName"):
                raise ApiError(
                    400, "BadRequest", "Unable to connect to VirtualMachineInstance because "
                    f"phase is {status.get('phase', 'Pending')} instead of Running",
                )  # fmt: skip
            backend = self.node_backend(status["nodeName"])
            path = backend.console_socket(self._machine_id(vmi), kind)
            assert isinstance(path, Path)
            return path

        return socket_of

    def _wake(self) -> None:
        with self.store.changed:
            self.store.changed.notify_all()

    # ---- the loop ----------------------------------------------------------------------------
    def _loop(self) -> None:
        while not self.closing.is_set():
            with self.store.changed:
                self.store.changed.wait(0.2)
            try:
                with self.lock:
                    self.reconcile()
            except Exception:  # a bug in the fake must not stop it for every later test
                import traceback

                traceback.print_exc()
            with self.passed:
                self.passes += 1
                self.passed.notify_all()

    def settled(self, passes: int = 3, timeout: float = 30) -> None:
        """Wait until the controller has reconciled everything `passes` more times: what it
        would do to the objects as they are, it has done."""
        with self.passed:
            target = self.passes + passes
            if not self.passed.wait_for(lambda: self.passes >= target, timeout):
                raise TimeoutError("the fake's controller stopped reconciling")

    def reconcile(self) -> None:
        self.cdi.reconcile()
        vms, _ = self.store.list(VM, None, lambda body: True)
        for vm in vms:
            self._reconcile_vm(vm)
        self.vm_state.forget_all_but({self._machine_id(vm) for vm in vms})
        vmis, _ = self.store.list(VMI, None, lambda body: True)
        for vmi in vmis:
            self._reconcile_vmi(vmi)
        self.snapshots.reconcile()
        self.migrations.reconcile()
        self.expansion.reconcile()
        placed = {self._machine_id(vmi) for vmi in self.store.list(VMI, None, lambda b: True)[0]}
        for backend in self.nodes.values():  # a VMI deleted with its VM: virt-handler's cleanup
            for machine_id in set(backend.running_machines()) - placed:
                backend.force_stop(machine_id)
                backend.undefine(machine_id)

    @staticmethod
    def _machine_id(vmi: Body) -> str:
        return f"{vmi['metadata']['namespace']}-{vmi['metadata']['name']}"[:40]

    def _reconcile_vm(self, vm: Body) -> None:
        """The VMI the runStrategy wants: Always keeps one, RerunOnFailure brings back a failed
        one, Once runs one whenever none exists, Manual follows start and stop requests, Halted keeps none."""
        namespace, name = vm["metadata"]["namespace"], vm["metadata"]["name"]
        key = (namespace, name)
        self._data_volumes(vm)
        strategy = vm["spec"].get("runStrategy", "Halted")
        status = copy.deepcopy(vm.get("status", {}))
        note = self.notes.setdefault(key, {"off": strategy == "Manual"})
        started = False
        for request in status.pop("stateChangeRequests", []):
            note["off"] = request["action"] == "Stop"
            started = request["action"] == "Start"
        vmi = self.store.find(VMI, namespace, name)
        deleting = key in self.stopping
        phase = vmi.get("status", {}).get("phase") if vmi else None
        if vmi is not None and phase in FINISHED and not deleting:
            # a finished VMI stays (Stopped) until the strategy reruns it or a start replaces it
            rerun = strategy == "Always" or (strategy == "RerunOnFailure" and phase == "Failed")
            note["off"] = not (rerun or started)
            if rerun or started or strategy == "Halted":
                self._remove_vmi(vmi)
                vmi = None
        wanted = {
            "Always": True,
            "RerunOnFailure": not note["off"],
            "Manual": not note["off"],
            "Once": True,  # a VMI whenever there is none; a finished one stays
        }.get(strategy, False)
        if not wanted and vmi is not None and not deleting and phase not in FINISHED:
            self._delete_vmi(vmi)
        volumes = _volume_names(vm["spec"]["template"]["spec"])
        if wanted and vmi is None and not deleting and self.cdi.ready(namespace, volumes):
            self._create_vmi(vm)
        self.live.propagate(vm)
        status.update(self._vm_status(vm, self.store.find(VMI, namespace, name)))
        if wanted and not status["created"]:  # waiting for its disks' imports
            failing = self.cdi.failing(namespace, volumes)
            status["printableStatus"] = "DataVolumeError" if failing else "Provisioning"
        if status != vm.get("status"):
            vm["status"] = status
            self.store.replace(VM, namespace, vm, status=True)

    def _vm_status(self, vm: Body, vmi: Body | None) -> Body:
        key = (vm["metadata"]["namespace"], vm["metadata"]["name"])
        if vmi is None:
            return {"printableStatus": "Stopped", "ready": False, "created": False}
        phase = vmi.get("status", {}).get("phase", "Pending")
        if key in self.stopping:
            printable = "Stopping"
        elif phase == "Running":
            printable = "Running"
        elif phase in FINISHED:
            printable = "Stopped"  # CrashLoopBackOff is a rerun's back-off, which has none
        elif _unschedulable(vmi):
            printable = "ErrorUnschedulable"
        else:
            printable = "Starting"
        return {"printableStatus": printable, "ready": phase == "Running", "created": True}

    def _data_volumes(self, vm: Body) -> None:
        """Each DataVolume template as a DataVolume the VM owns, for CDI to populate."""
        namespace = vm["metadata"]["namespace"]
        for template in vm["spec"].get("dataVolumeTemplates", []):
            name = template["metadata"]["name"]
            if self.store.find(DATA_VOLUME, namespace, name) is not None:
                continue
            body = copy.deepcopy(template)
            body["metadata"]["ownerReferences"] = [_owner(vm)]
            self.store.create(DATA_VOLUME, namespace, body)

    def _create_vmi(self, vm: Body) -> None:
        template = copy.deepcopy(vm["spec"]["template"])
        meta = template.get("metadata", {})
        meta.update(name=vm["metadata"]["name"], ownerReferences=[_owner(vm)])
        body = {"metadata": meta, "spec": template["spec"]}
        made = self.store.create(VMI, vm["metadata"]["namespace"], body)
        made["status"] = {"phase": "Pending"}
        self.store.replace(VMI, vm["metadata"]["namespace"], made, status=True)

    def _delete_vmi(self, vmi: Body, *, grace: int | None = None) -> None:
        """A graceful delete powers the guest down and cuts the power after its grace period
        (the VMI's own, or `grace` as a stop's gracePeriod sets it); grace 0 cuts it at once.
        A second delete may shorten the time left, never lengthen it."""
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        node = vmi.get("status", {}).get("nodeName")
        running = node is not None and vmi.get("status", {}).get("phase") == "Running"
        if not running:
            self._remove_vmi(vmi)
            return
        if grace is None:
            grace = vmi["spec"].get("terminationGracePeriodSeconds", GRACE_SECONDS)
        backend = self.node_backend(node)
        if grace == 0:
            backend.force_stop(self._machine_id(vmi))
        elif key not in self.stopping:
            backend.shutdown(self._machine_id(vmi))
        deadline = time.monotonic() + grace
        if (earlier := self.stopping.get(key)) is not None:
            deadline = min(deadline, earlier.deadline)
        self.stopping[key] = Stopping(deadline, grace == 0)

    def _remove_vmi(self, vmi: Body) -> None:
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        self.stopping.pop(key, None)
        node = vmi.get("status", {}).get("nodeName")
        if node is not None:
            backend, machine_id = self.node_backend(node), self._machine_id(vmi)
            if backend.status(machine_id).power is Power.RUNNING:
                backend.force_stop(machine_id)
            self.vm_state.keep(vmi, RunFolder(self.root / node / machine_id), machine_id)
            backend.undefine(machine_id)
        with contextlib.suppress(ApiError):  # gone already
            self.store.delete(VMI, *key)

    def _reconcile_vmi(self, vmi: Body) -> None:
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        status = vmi.setdefault("status", {})
        phase = status.get("phase", "Pending")
        if phase in ("Pending", "Scheduling"):
            if not self.cdi.ready(key[0], _volume_names(vmi["spec"])):
                return  # KubeVirt starts no VMI before its DataVolumes are imported
            node = self._schedule(vmi)
            if node is None:
                status["phase"] = "Scheduling"
                status["conditions"] = [{
                    "type": "PodScheduled", "status": "False", "reason": "Unschedulable",
                    "message": f"0/{len(self.store.list(NODE, None, lambda b: True)[0])} "
                    "nodes are available: no node in its zone has room for it.",
                }]  # fmt: skip
            else:
                status.update(phase="Scheduled", nodeName=node, conditions=[])
                self.store.replace(VMI, key[0], vmi, status=True)
                self._launch(vmi, node)
                return
        elif phase == "Scheduled":  # its launcher waits for what it mounts (a seed Secret)
            self._launch(vmi, status["nodeName"])
            return
        elif phase == "Running":
            backend, machine_id = self.node_backend(status["nodeName"]), self._machine_id(vmi)
            machine = backend.status(machine_id)
            stopping = self.stopping.get(key)
            if machine.power is Power.STOPPED:
                if stopping is not None:
                    self._remove_vmi(vmi)
                    return
                status["phase"] = (
                    "Succeeded" if machine.exit is ExitKind.GUEST_POWEROFF else "Failed"
                )
            elif stopping is not None and time.monotonic() > stopping.deadline:
                backend.force_stop(machine_id)
            elif stopping is None:  # live updates, then the agent's data (live.py, agent.py)
                self.agent.refresh(vmi, status, fresh=self.live.apply(vmi, status))
        current = self.store.find(VMI, *key)
        if current is not None and current.get("status") != status:
            current["status"] = status
            self.store.replace(VMI, key[0], current, status=True)

    def _schedule(self, vmi: Body) -> str | None:
        """A node of the VMI's zone (its nodeSelector) with memory for it beside its others."""
        return self.node_for(vmi, vmi["spec"].get("nodeSelector", {}))

    def node_for(self, vmi: Body, selector: dict[str, str], exclude: str = "") -> str | None:
        """A node matching `selector`, but `exclude`, with memory for the VMI."""
        wanted = _quantity_mb(vmi["spec"]["domain"].get("memory", {}).get("guest", "128Mi"))
        nodes, _ = self.store.list(NODE, None, lambda body: True)
        placed, _ = self.store.list(VMI, None, lambda body: True)
        for node in nodes:
            labels = node["metadata"].get("labels", {})
            if node["metadata"]["name"] == exclude or any(
                labels.get(key) != value for key, value in selector.items()
            ):
                continue
            used = sum(
                _quantity_mb(other["spec"]["domain"].get("memory", {}).get("guest", "128Mi"))
                for other in placed
                if other.get("status", {}).get("nodeName") == node["metadata"]["name"]
            )
            if used + wanted <= _quantity_mb(node["status"]["allocatable"]["memory"]):
                return node["metadata"]["name"]
        return None

    def _launch(self, vmi: Body, node: str) -> None:
        key = (vmi["metadata"]["namespace"], vmi["metadata"]["name"])
        try:
            spec = self.machine_for(vmi)
        except ApiError:  # a Secret it mounts is not there yet: the pod waits for it
            return
        except BackendError as error:  # a containerDisk it could not pull
            spec = None
            vmi["status"].update(phase="Failed", reason=error.message)
        if spec is not None:
            run = RunFolder(self.root / node / spec.id)
            self.vm_state.restore(vmi, run, spec.id)
        try:
            if spec is not None:
                self.node_backend(node).start(spec)
        except BackendError as error:
            vmi["status"].update(phase="Failed", reason=error.message)
        else:
            if spec is not None:
                vmi["status"]["phase"] = "Running"
        current = self.store.find(VMI, *key)
        if current is not None:
            current["status"] = vmi["status"]
            self.store.replace(VMI, key[0], current, status=True)

    # ---- a VMI as the QEMU backend's machine -----------------------------------------------
    def machine_for(self, vmi: Body) -> MachineSpec:
        spec, namespace = vmi["spec"], vmi["metadata"]["namespace"]
        domain = spec["domain"]
        cpu = domain.get("cpu", {})
        sockets, cores, threads = cpu.get("sockets", 1), cpu.get("cores", 1), cpu.get("threads", 1)
        firmware = domain.get("firmware", {})
        efi = firmware.get("bootloader", {}).get("efi")
        kernel = initrd = None
        cmdline = ""
        if boot := firmware.get("kernelBoot"):
            folder = self.registry.get(boot["container"]["image"])
            if folder is None:
                raise BackendError(
                    f"ErrImagePull: {boot['container']['image']} is not in the registry"
                )
            kernel = folder / Path(boot["container"]["kernelPath"]).name
            initrd = folder / Path(boot["container"]["initrdPath"]).name
            cmdline = boot.get("kernelArgs", "")
        volumes = {volume["name"]: volume for volume in spec.get("volumes", [])}
        disks, seed = [], None
        for index, device in enumerate(domain["devices"].get("disks", [])):
            volume = volumes.get(device["name"], {})
            if "cloudInitNoCloud" in volume:
                seed = self._seed(vmi, volume["cloudInitNoCloud"])
                continue
            size, source, cdrom = 1, None, "cdrom" in device
            if "containerDisk" in volume:  # the node pulls it, through the hosts' own cache
                login = self._pull_login(namespace, volume["containerDisk"])
                disks.append(replace(
                    container_disk(volume["containerDisk"]["image"], login), name=device["name"],
                    boot_order=device.get("bootOrder"), serial=device.get("serial", ""),
                ))  # fmt: skip
                continue
            if "dataVolume" in volume:
                source = self.cdi.disk_file(namespace, volume["dataVolume"]["name"], cdrom=cdrom)
                name = volume["dataVolume"]["name"]
                data_volume = self.store.find(DATA_VOLUME, namespace, name)
                request = (data_volume or {}).get("spec", {}).get("storage", {})
                asked = request.get("resources", {}).get("requests", {}).get("storage", "1Gi")
                has = self.expansion.capacity(namespace, name)  # grown since, maybe
                size = max(1, _quantity_mb(has or asked) // 1024)
            disks.append(DiskSpec(
                name=device["name"], role="cdrom" if cdrom else ("root" if index == 0 else "secondary"),
                bus="sata" if cdrom else device.get("disk", {}).get("bus", "virtio"),
                size_gb=0 if cdrom else size, boot_order=device.get("bootOrder"),
                serial=device.get("serial", ""), source=source,
            ))  # fmt: skip
        networks = {network["name"]: network for network in spec.get("networks", [])}
        nics = []
        for interface in domain["devices"].get("interfaces", []):
            multus = networks.get(interface["name"], {}).get("multus")
            nics.append(NicSpec(
                name=interface["name"], mac=interface.get("macAddress", ""),
                model=interface.get("model", "virtio"), link_up=interface.get("state") != "down",
                network=multus["networkName"] if multus else "",
            ))  # fmt: skip
        return MachineSpec(
            id=self._machine_id(vmi), name=vmi["metadata"]["name"],
            vcpus=sockets * cores * threads, sockets=sockets, cores=cores, threads=threads,
            memory_mb=_quantity_mb(domain.get("memory", {}).get("guest", "128Mi")),
            firmware=FirmwareSpec(
                bootloader="uefi" if efi is not None else "bios",
                secure_boot=efi is not None and efi.get("secureBoot", True),
                persistent_efi=bool(efi and efi.get("persistent")),
                vtpm=_tpm(domain) is not None,
            ),
            disks=tuple(disks), nics=tuple(nics), seed=seed,
            kernel=kernel, initrd=initrd, kernel_cmdline=cmdline,
        )  # fmt: skip

    def _pull_login(self, namespace: str, source: Body) -> tuple[str, str]:
        """The user and password of a containerDisk's imagePullSecret (a .dockerconfigjson)."""
        if not source.get("imagePullSecret"):
            return "", ""
        secret = self.store.get(SECRET, namespace, source["imagePullSecret"])
        text = (
            secret.get("stringData", {}).get(".dockerconfigjson")
            or base64.b64decode(secret.get("data", {}).get(".dockerconfigjson", "")).decode()
        )
        auths = json.loads(text or "{}").get("auths", {})
        registry = source["image"].split("/", 1)[0]
        user, _, password = (
            base64.b64decode(auths.get(registry, {}).get("auth", "")).decode().partition(":")
        )
        return user, password

    def _seed(self, vmi: Body, nocloud: Body) -> CloudInitSeed:
        namespace = vmi["metadata"]["namespace"]

        def secret_text(reference: Body | None, key: str) -> str:
            if reference is None:
                return ""
            secret = self.store.get(SECRET, namespace, reference["name"])
            if key in secret.get("stringData", {}):
                return secret["stringData"][key]
            return base64.b64decode(secret.get("data", {}).get(key, "")).decode()

        user = nocloud.get("userData") or secret_text(nocloud.get("secretRef"), "userdata")
        network = nocloud.get("networkData") or secret_text(
            nocloud.get("networkDataSecretRef"), "networkdata"
        )
        name = vmi["metadata"]["name"]
        meta = f"instance-id: {vmi['metadata']['uid']}\nlocal-hostname: {name}\n"
        return CloudInitSeed(meta_data=meta, user_data=user, network_config=network)


def container_disk(image: str, login: tuple[str, str] = ("", "")) -> DiskSpec:
    """A containerDisk volume's image pulled into the cache a node's QEMU boots it from; a pull
    that fails is the pod's ErrImagePull."""
    try:
        reference = parse_reference(image)
        access = Access(plain_http(reference.registry), username=login[0], password=login[1])
        cached = cache.pull(reference, access)
    except ContainerDiskError as error:
        raise BackendError(f"ErrImagePull: {error.message}") from None
    return DiskSpec(name="", role="container", bus="virtio", source=cached.path, reference=image)


def _tpm(domain: Body) -> Body | None:
    """The domain's vTPM, if it has one: `tpm: {}` is one, kept only if `persistent`."""
    tpm = domain.get("devices", {}).get("tpm")
    return tpm if tpm is not None and tpm.get("enabled", True) else None


def _owner(vm: Body) -> Body:
    return {
        "apiVersion": "kubevirt.io/v1", "kind": "VirtualMachine", "name": vm["metadata"]["name"],
        "uid": vm["metadata"]["uid"], "controller": True,
    }  # fmt: skip


def _volume_names(template_spec: Body) -> list[str]:
    """The DataVolumes a VMI (spec) mounts."""
    return [v["dataVolume"]["name"] for v in template_spec.get("volumes", []) if "dataVolume" in v]


def _unschedulable(vmi: Body) -> bool:
    return any(
        condition.get("reason") == "Unschedulable"
        for condition in vmi.get("status", {}).get("conditions", [])
    )
