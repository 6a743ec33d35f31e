"""`manage.py apply -f` on kubevirt.io/v1 VirtualMachine manifests: each field mapped onto an
instance, what has no place in the console refused at its line, an export's placeholders too."""

import pytest

from instances.manifests.vm_export import instance_manifest
from instances.models import Instance
from instances.services.instances import instance_create
from tests.factories import instance_request
from tests.yaml_bombs import billion_laughs

pytestmark = pytest.mark.django_db

VM = """\
apiVersion: kubevirt.io/v1
kind: VirtualMachine
metadata:
  name: vm-1
  annotations:
    zopday.io/project: alpha
spec:
  runStrategy: Halted
  dataVolumeTemplates:
    - metadata:
        name: vm-1-root
        annotations: {zopday.io/image: demo}
      spec:
        source: {http: {url: "https://images.example/demo.qcow2"}}
        storage: {resources: {requests: {storage: 2Gi}}}
    - metadata: {name: vm-1-data}
      spec:
        source: {blank: {}}
        storage: {resources: {requests: {storage: 3Gi}}}
  template:
    spec:
      nodeSelector: {topology.kubernetes.io/zone: local-1a}
      domain:
        cpu: {sockets: 1, cores: 2, threads: 1}
        memory: {guest: 2Gi}
        firmware: {bootloader: {efi: {secureBoot: false, persistent: true}}}
        devices:
          disks:
            - {name: root, disk: {bus: virtio}, bootOrder: 1}
            - {name: data, disk: {bus: sata}}
            - {name: cloudinit, disk: {bus: virtio}}
          interfaces:
            - {name: eth0, bridge: {}, macAddress: "52:54:00:AA:BB:01", model: e1000}
            - {name: eth1, bridge: {}, state: down}
          tpm: {persistent: true}
      networks:
        - {name: eth0, multus: {networkName: backend-nad}}
        - {name: eth1, multus: {networkName: backend-nad}}
      volumes:
        - {name: root, dataVolume: {name: vm-1-root}}
        - {name: data, dataVolume: {name: vm-1-data}}
        - name: cloudinit
          cloudInitNoCloud:
            userData: |
              #cloud-config
              hostname: vm-1
---
apiVersion: k8s.cni.cncf.io/v1
kind: NetworkAttachmentDefinition
metadata:
  name: backend-nad
  annotations: {zopday.io/subnet: backend}
spec:
  config: '{"cniVersion": "0.3.1", "name": "backend", "type": "bridge", "ipam": {}}'
"""


NO_SETTING = "The console has no setting for this field; remove it."


def line_of(text: str, needle: str) -> int:
    return next(n for n, line in enumerate(text.splitlines(), 1) if needle in line)


def test_a_virtual_machine_becomes_an_instance_with_each_field(apply):
    out = apply(VM)
    assert "+ instance alpha/vm-1 (create)" in out
    instance = Instance.objects.get(name="vm-1")
    assert (instance.run_strategy, instance.vcpus, instance.memory_gb) == ("Halted", 2, 2)
    assert (instance.sockets, instance.cores, instance.threads) == (1, 2, 1)
    assert (instance.bootloader, instance.secure_boot, instance.persistent_efi) == (
        "uefi", False, True,
    )  # fmt: skip
    assert instance.vtpm
    assert (instance.user_data_mode, instance.custom_user_data) == (
        "custom", "#cloud-config\nhostname: vm-1\n",
    )  # fmt: skip
    root = instance.disks.get(role="root")
    assert (root.image.name, root.size_gb, root.bus) == ("demo", 2, "virtio")
    data = instance.disks.get(name="data")
    assert (data.role, data.size_gb, data.bus) == ("secondary", 3, "sata")
    eth0, eth1 = instance.nics.order_by("index")
    assert (eth0.subnet.name, eth0.mac, eth0.model, eth0.link_desired) == (
        "backend", "52:54:00:aa:bb:01", "e1000", "up",
    )  # fmt: skip
    assert eth1.link_desired == "down"
    again = apply(VM, "--dry-run")
    assert "  instance alpha/vm-1 (unchanged)" in again


def test_fields_without_a_setting_are_refused_at_their_line(refused):
    text = VM.replace(
        "        cpu: {sockets: 1, cores: 2, threads: 1}\n",
        "        cpu: {sockets: 1, cores: 2, threads: 1, model: host-passthrough}\n"
        "        ioThreadsPolicy: auto\n",
    ).replace(
        "    spec:\n      nodeSelector", "    spec:\n      hostname: other\n      nodeSelector"
    )
    refusal = refused(text)
    assert refusal.problems == [
        f"instance.yaml:{line_of(text, 'hostname: other')}: spec.template.spec.hostname: {NO_SETTING}",
        f"instance.yaml:{line_of(text, 'model: host-passthrough')}: "
        f"spec.template.spec.domain.cpu.model: {NO_SETTING}",
        f"instance.yaml:{line_of(text, 'ioThreadsPolicy')}: "
        f"spec.template.spec.domain.ioThreadsPolicy: {NO_SETTING}",
    ]
    assert not Instance.objects.filter(name="vm-1").exists()


def test_an_unused_companion_and_a_pod_network_are_refused(refused):
    text = VM.replace("multus: {networkName: backend-nad}}\n        - {name: eth1,", "pod: {}}\n"
                      "        - {name: eth1,")  # fmt: skip
    text += "---\napiVersion: v1\nkind: Secret\nmetadata: {name: spare}\nstringData: {a: b}\n"
    refusal = refused(text)
    assert any("Give a multus network" in line for line in refusal.problems)
    assert any("No VirtualMachine here uses this Secret." in line for line in refusal.problems)


def test_an_exports_placeholder_must_be_filled_in(refused, operator, owner, subnet, image):
    request = instance_request(subnet, image=image, name="web-9")
    instance = instance_create(project=subnet.project, actor=operator, request=request)
    text = instance_manifest(instance, redact=False)
    placeholder = line_of(text, "FILL-IN")
    assert "# FILL IN: an OCI image" in text.splitlines()[placeholder - 1]
    refusal = refused(text, user="owner")
    assert any(
        line.startswith(f"instance.yaml:{placeholder}: ") and "Fill in this placeholder" in line
        for line in refusal.problems
    )


def test_the_project_comes_from_the_namespace_and_a_subnet_from_its_segment(apply, subnet):
    text = (
        VM.split("---")[0]
        .replace("  annotations:\n    zopday.io/project: alpha\n", "  namespace: alpha\n")
        .replace("backend-nad", subnet.segment)
    )
    assert "+ instance alpha/vm-1 (create)" in apply(text)
    assert Instance.objects.get(name="vm-1").nics.filter(subnet=subnet).count() == 2


def test_a_billion_laughs_in_user_data_or_network_data_is_refused_at_its_field(refused):
    laughs = billion_laughs(" " * 14)
    alias = "Aliases (*l0) are not accepted: write the value out where it is used"
    refusal = refused(VM.replace("              hostname: vm-1\n", laughs))
    assert refusal.problems == [
        f"instance.yaml:1 (instance vm-1): custom_user_data: In the cloud-config: {alias} (line 3)."
    ]
    network = VM.replace(
        "              #cloud-config\n              hostname: vm-1\n",
        "              #cloud-config\n            networkData: |\n" + laughs,
    )
    refusal = refused(network)
    assert refusal.problems == [
        f"instance.yaml:{line_of(network, 'networkData')}: spec.template.spec.volumes[2]."
        f"cloudInitNoCloud.networkData: In the network config: {alias} (line 2)."
    ]
    assert not Instance.objects.exists()
