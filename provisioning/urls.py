from django.urls import path

from provisioning import views

P = "projects/<slug:project_slug>/provisioning/"

urlpatterns = [
    path(P, views.job_list, name="provisioning-job-list"),
    path(P + "new/", views.wizard, name="provisioning-wizard-start"),
    path(P + "new/<str:step>/", views.wizard, name="provisioning-wizard"),
    path(P + "jobs/<int:pk>/", views.job_detail, name="provisioning-job-detail"),
    path(P + "jobs/<int:pk>/progress/", views.job_progress, name="provisioning-job-progress"),
    path(P + "jobs/<int:pk>/<str:action>/", views.job_action, name="provisioning-job-action"),
    path(P + "accounts/", views.account_list, name="provisioning-accounts"),
    path(P + "accounts/<int:pk>/test/", views.account_test, name="provisioning-account-test"),
]
