"""Kubernetes documents in a manifest: `kubevirt.io/v1` VirtualMachines, each read as the
console's own Instance document, with the Secrets and NetworkAttachmentDefinitions they use.

A VM's project is its `zopday.io/project` annotation, else its namespace (a project's slug, or
its namespace on a cluster). A redacted export, a placeholder left in, a field with no setting
in the console, a companion no VM uses: each is refused at its line.
"""

import json
from typing import Any

import yaml

from instances.bounded_yaml import yaml_compose_all
from instances.manifests.errors import Problem
from instances.manifests.vm_export import (
    CLUSTER,
    INSTANCE_NAME,
    PLACEHOLDER,
    PROJECT,
    REDACTED_MARK,
    SSH_KEYS,
    SUBNET,
    USER_DATA,
)
from instances.manifests.vm_fields import Fields, leftover_problems, placeholder_problems
from instances.manifests.vm_spec import Companions, VmReader
from instances.models import Cluster, Project

# A VirtualMachine read as the console's document: where, project slug, instance name, spec.
Declared = tuple[str, str, str, dict[str, Any]]

KINDS = {
    "VirtualMachine": "kubevirt.io/v1",
    "Secret": "v1",
    "NetworkAttachmentDefinition": "k8s.cni.cncf.io/v1",
}
REDACTED_MESSAGE = (
    "This export's user data has its credentials hidden (only the project's admins export "
    "them): applying it would overwrite the user data. Export it as an admin, or put the user "
    "data back in full and remove this annotation."
)


def _nodes(text: str) -> dict[int, yaml.Node]:
    """Each document's node by the line it starts on (as documents.py locates them)."""
    try:
        return {node.start_mark.line + 1: node for node in yaml_compose_all(text)}
    except yaml.YAMLError:
        return {}


def kubernetes_documents(
    source: str, text: str, found: list[tuple[str, dict[str, Any]]]
) -> tuple[list[Declared], list[Problem]]:
    """The VirtualMachines among `found` (where, data) as instance documents, and every
    problem."""
    nodes = _nodes(text)
    companions = Companions()
    machines: list[Fields] = []
    problems: list[Problem] = []
    for where, data in found:
        start = int(where.rsplit(":", 1)[1])
        fields = Fields(source, start, data, nodes.get(start))
        kind, version = fields.get("kind"), fields.get("apiVersion")
        if kind not in KINDS:
            problems.append(
                fields.problem(("kind",), "Give kind: Instance, or a kubevirt.io/v1 "
                               "VirtualMachine with its Secret and NetworkAttachmentDefinitions.")
            )  # fmt: skip
            continue
        if version != KINDS[kind]:
            problems.append(fields.problem(("apiVersion",), f"A {kind} is {KINDS[kind]}."))
            continue
        name = fields.get("metadata", "name")
        if not isinstance(name, str) or not name:
            problems.append(fields.problem(("metadata",), "Give metadata.name."))
            continue
        if kind == "VirtualMachine":
            machines.append(fields)
        else:
            pool = companions.secrets if kind == "Secret" else companions.networks
            pool[name] = fields
    documents = []
    for vm in machines:
        document, found_problems = _machine(vm, companions)
        problems += found_problems
        if document is not None:
            documents.append(document)
    for pool in (companions.secrets, companions.networks):
        for fields in pool.values():
            problems += _companion(fields, used=id(fields) in companions.used)
    return documents, problems


def _project(vm: Fields) -> Project | None:
    slug = vm.get("metadata", "annotations", PROJECT)
    namespace = vm.get("metadata", "namespace")
    if slug is None and namespace:
        slugs = {str(namespace)}
        for prefix in Cluster.objects.values_list("namespace_prefix", flat=True):
            if prefix and str(namespace).startswith(prefix):
                slugs.add(str(namespace).removeprefix(prefix))
        return Project.objects.filter(slug__in=slugs).first()
    return Project.objects.filter(slug=str(slug)).first() if slug else None


def _machine(vm: Fields, companions: Companions) -> tuple[Declared | None, list[Problem]]:
    problems = placeholder_problems(vm, PLACEHOLDER)
    if vm.get("metadata", "annotations", REDACTED_MARK) is not None:
        problems.append(vm.problem(("metadata", "annotations", REDACTED_MARK), REDACTED_MESSAGE))
    name = str(vm.get("metadata", "annotations", INSTANCE_NAME, default=vm.get("metadata", "name")))
    project = _project(vm)
    if project is None:
        problems.append(
            vm.problem(("metadata",), f"Say which project: annotate {PROJECT}: its slug, or give "
                       "the project's namespace.")
        )  # fmt: skip
        return None, problems
    reader = VmReader(vm, project, name, companions)
    spec = reader.read()
    vm.get("metadata", "annotations", USER_DATA)
    if cluster := vm.get("metadata", "annotations", CLUSTER):
        spec["cluster"] = cluster
    keys = vm.get("metadata", "annotations", SSH_KEYS, default="")
    spec["ssh_keys"] = [key.strip() for key in str(keys).split(",") if key.strip()]
    problems += reader.problems + leftover_problems(vm)
    where = f"{vm.source}:{vm.start} (instance {name})"
    return (where, project.slug, name, spec), problems


def _companion(fields: Fields, *, used: bool) -> list[Problem]:
    """A Secret or NetworkAttachmentDefinition: used by a VM here, with nothing else in it."""
    kind = fields.get("kind")
    if not used:
        return [fields.problem(("metadata", "name"), f"No VirtualMachine here uses this {kind}.")]
    problems = placeholder_problems(fields, PLACEHOLDER)
    fields.get("metadata", "namespace")
    fields.get("metadata", "labels", "app.kubernetes.io/managed-by")
    if kind == "Secret":
        if fields.get("metadata", "annotations", REDACTED_MARK) is not None:
            path = ("metadata", "annotations", REDACTED_MARK)
            problems.append(fields.problem(path, REDACTED_MESSAGE))
        if fields.get("type", default="Opaque") != "Opaque":
            problems.append(fields.problem(("type",), "The NoCloud Secret is Opaque."))
    else:
        fields.get("metadata", "annotations", SUBNET)
        try:
            config = json.loads(str(fields.get("spec", "config")))
        except ValueError:
            config = None
        if not isinstance(config, dict) or config.get("type") != "bridge":
            message = "The console's subnets are bridge CNI networks: give its JSON config."
            problems.append(fields.problem(("spec", "config"), message))
    return problems + leftover_problems(fields)
