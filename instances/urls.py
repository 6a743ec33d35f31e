from django.urls import path

from instances import views

urlpatterns = [
    path("", views.home, name="home"),
    path("projects/<slug:project_slug>/", views.project_overview, name="project-overview"),
    path("projects/<slug:project_slug>/events/", views.project_events, name="project-events"),
]
