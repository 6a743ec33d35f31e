"""A source applies to its own project only: a document naming another project is refused,
whatever the acting user may do there."""

from typing import Any

import yaml

from instances.bounded_yaml import BoundedLoader
from instances.manifests.vm_export import PROJECT as PROJECT_ANNOTATION
from instances.models import Cluster, Project


def _project_named(data: Any, slug: str) -> str | None:
    """The project a document names when it is not `slug` (None when it names `slug` or none),
    read as the manifests read it: any value as text, a VM's namespace with or without a
    cluster's prefix."""
    if not isinstance(data, dict):
        return None
    if "apiVersion" not in data:
        project = data.get("project")
        return None if project is None or str(project) == slug else str(project)
    if data.get("kind") != "VirtualMachine" or not isinstance(data.get("metadata"), dict):
        return None
    metadata = data["metadata"]
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict) and annotations.get(PROJECT_ANNOTATION) is not None:
        named = str(annotations[PROJECT_ANNOTATION])
        return None if named == slug else named
    if metadata.get("namespace") is None:
        return None
    namespace = str(metadata["namespace"])
    candidates = {namespace}
    for prefix in Cluster.objects.values_list("namespace_prefix", flat=True):
        if prefix and namespace.startswith(prefix):
            candidates.add(namespace.removeprefix(prefix))
    found = set(Project.objects.filter(slug__in=candidates).values_list("slug", flat=True))
    return None if found <= {slug} and (found or slug in candidates) else namespace


def foreign_documents(*, sources: list[tuple[str, str]], slug: str) -> list[str]:
    """`file:line: message` for each document that names a project other than `slug`. A file
    that is not valid YAML is left to the manifests' own reading, which says where."""
    problems = []
    for name, text in sources:
        try:
            loader = BoundedLoader(text)
        except yaml.YAMLError:
            continue
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    break
                project = _project_named(loader.construct_document(node), slug)
                if project is not None:
                    problems.append(
                        f"{name}:{node.start_mark.line + 1}: project: this repository applies "
                        f"to project {slug} only, not {project}."
                    )
        except yaml.YAMLError:
            continue
        finally:
            loader.dispose()
    return problems
