from django.contrib.auth.decorators import login_required
from django.core.paginator import Paginator
from django.http import HttpResponse
from django.shortcuts import redirect, render

from instances import selectors
from instances.access import project_for_user
from instances.http import AuthedRequest
from instances.manifests.kinds import KINDS


@login_required
def home(request: AuthedRequest) -> HttpResponse:
    """Go straight to the user's project when they have one; otherwise list them."""
    projects = list(selectors.projects_for_user(request.user))
    if len(projects) == 1:
        return redirect("project-overview", project_slug=projects[0].slug)
    return render(request, "instances/home.html", {"projects": projects})


@login_required
def project_overview(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    return render(
        request,
        "instances/project_overview.html",
        {
            "project": project,
            "role": role,
            "members": selectors.project_members(project),
            "events": selectors.project_audit_events(project)[:10],
            # objects with no page of their own, listed here to be exported one by one
            "free_disks": KINDS["Disk"].objects(project),
            "elastic_ips": KINDS["ElasticIP"].objects(project),
        },
    )


@login_required
def project_events(request: AuthedRequest, project_slug: str) -> HttpResponse:
    project, role = project_for_user(request.user, project_slug)
    page = Paginator(selectors.project_audit_events(project), 50).get_page(request.GET.get("page"))
    return render(
        request, "instances/project_events.html", {"project": project, "role": role, "page": page}
    )
