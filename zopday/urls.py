from django.contrib import admin
from django.contrib.auth import views as auth_views
from django.urls import include, path, re_path

from zopday.api import api_urls, unknown_path

urlpatterns = [
    path("admin/", admin.site.urls),
    path("api/v1/", api_urls()),
    re_path(r"^api/v1/", unknown_path),
    path("login/", auth_views.LoginView.as_view(), name="login"),
    path("logout/", auth_views.LogoutView.as_view(), name="logout"),
    path("", include("provisioning.urls")),
    path("", include("instances.urls")),
]

handler400 = "instances.views.errors.bad_request"
handler403 = "instances.views.errors.permission_denied"
handler404 = "instances.views.errors.page_not_found"
