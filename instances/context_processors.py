from django.http import HttpRequest

from instances.selectors import projects_for_user


def projects(request: HttpRequest) -> dict[str, object]:
    """The projects for the switcher, and the current one when the URL names it."""
    if not request.user.is_authenticated:
        return {}
    match = request.resolver_match
    current = match.kwargs.get("project_slug") if match else None
    return {"switcher_projects": projects_for_user(request.user), "current_project_slug": current}
