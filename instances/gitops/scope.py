"""A source applies to its own project only: a document naming another project is refused,
whatever the acting user may do there."""

from typing import Any

import yaml

from instances.manifests.vm_export import PROJECT as PROJECT_ANNOTATION


def _project_named(data: Any) -> str | None:
    if not isinstance(data, dict):
        return None
    if "apiVersion" not in data:
        project = data.get("project")
        return project if isinstance(project, str) else None
    if data.get("kind") != "VirtualMachine" or not isinstance(data.get("metadata"), dict):
        return None
    metadata = data["metadata"]
    annotations = metadata.get("annotations")
    if isinstance(annotations, dict) and isinstance(annotations.get(PROJECT_ANNOTATION), str):
        return str(annotations[PROJECT_ANNOTATION])
    namespace = metadata.get("namespace")
    return namespace if isinstance(namespace, str) else None


def foreign_documents(*, sources: list[tuple[str, str]], slug: str) -> list[str]:
    """`file:line: message` for each document that names a project other than `slug`. A file
    that is not valid YAML is left to the manifests' own reading, which says where."""
    problems = []
    for name, text in sources:
        loader = yaml.SafeLoader(text)
        try:
            while loader.check_node():
                node = loader.get_node()
                if node is None:
                    break
                project = _project_named(loader.construct_document(node))
                if project is not None and project != slug:
                    problems.append(
                        f"{name}:{node.start_mark.line + 1}: project: this repository applies "
                        f"to project {slug} only, not {project}."
                    )
        except yaml.YAMLError:
            continue
        finally:
            loader.dispose()
    return problems
