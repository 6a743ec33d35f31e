from django.http import HttpRequest
from django.urls import reverse
from django.utils.functional import SimpleLazyObject

from instances.selectors import projects_for_user


def projects(request: HttpRequest) -> dict[str, object]:
    """The project switcher's entries (name, url) and the current project's slug.

    Built lazily, with one URL reversal for all entries: a member of many projects must not pay
    a reversal per project on every page.
    """
    if not request.user.is_authenticated:
        return {}
    match = request.resolver_match
    current = match.kwargs.get("project_slug") if match else None

    def entries() -> list[tuple[str, str, str]]:
        pattern = reverse("project-overview", args=["__slug__"])
        rows = projects_for_user(request.user).values_list("name", "slug")
        return [(name, pattern.replace("__slug__", slug), slug) for name, slug in rows]

    return {"switcher_projects": SimpleLazyObject(entries), "current_project_slug": current}
