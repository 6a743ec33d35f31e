from django.urls import path, register_converter

from instances.converters import ObjectName
from instances.views import (
    catalog,
    consoles,
    container_images,
    details,
    gitops,
    image_import,
    instances,
    manifests,
    networking,
    power,
    projects,
    serial_output,
    storage,
    url_imports,
)

register_converter(ObjectName, "object_name")

P = "projects/<slug:project_slug>/"
INSTANCE = P + "instances/<int:pk>/"

urlpatterns = [
    path("", projects.home, name="home"),
    path(P, projects.project_overview, name="project-overview"),
    path(P + "events/", projects.project_events, name="project-events"),
    path(P + "manifest.yaml", manifests.project_manifest_download, name="project-manifest"),
    path(
        P + "manifest/<str:kind>/<object_name:name>.yaml",
        manifests.project_manifest_download,
        name="object-manifest",
    ),
    path(P + "instances/", instances.instance_list, name="instance-list"),
    path(P + "instances/new/", instances.instance_new, name="instance-new"),
    path(
        P + "instances/new/<str:kind>-row/", instances.instance_form_row, name="instance-form-row"
    ),
    path(INSTANCE, details.instance_detail, name="instance-detail"),
    path(INSTANCE + "row/", instances.instance_row, name="instance-row"),
    path(INSTANCE + "power/", power.instance_power_panel, name="instance-power-panel"),
    path(INSTANCE + "power/<str:action>/", power.instance_power, name="instance-power"),
    path(INSTANCE + "run-strategy/", instances.instance_run_strategy, name="instance-run-strategy"),
    path(INSTANCE + "delete/", instances.instance_delete_view, name="instance-delete"),
    path(INSTANCE + "disks/<str:action>/", storage.disk_action, name="instance-disk-action"),
    path(INSTANCE + "nics/<str:action>/", networking.nic_action, name="instance-nic-action"),
    path(INSTANCE + "console/<str:kind>/", consoles.console_page, name="instance-console"),
    path(
        INSTANCE + "console/<str:kind>/ticket/",
        consoles.console_ticket,
        name="instance-console-ticket",
    ),
    path(
        INSTANCE + "manifest.yaml", manifests.instance_manifest_download, name="instance-manifest"
    ),
    path(INSTANCE + "serial.log", consoles.serial_log_download, name="instance-serial-log"),
    path(
        INSTANCE + "serial-output/",
        serial_output.instance_serial_output,
        name="instance-serial-output",
    ),
    path(
        INSTANCE + "console-sessions/", consoles.console_sessions, name="instance-console-sessions"
    ),
    path(
        INSTANCE + "console-sessions/<int:session_id>/replay/",
        consoles.console_replay,
        name="instance-console-replay",
    ),
    path(
        INSTANCE + "console-sessions/<int:session_id>/recording.cast",
        consoles.console_recording,
        name="instance-console-recording",
    ),
    path(P + "git/", gitops.git_source_page, name="git-source"),
    path(P + "git/syncs/", gitops.git_source_syncs, name="git-source-syncs"),
    path(P + "git/sync/", gitops.git_source_sync_now, name="git-source-sync"),
    path(P + "git/disconnect/", gitops.git_source_disconnect, name="git-source-disconnect"),
    path(P + "git/webhook-secret/", gitops.git_webhook_rotate, name="git-webhook-rotate"),
    path("gitops/<uuid:webhook_id>/webhook/", gitops.git_webhook, name="git-webhook"),
    path(P + "subnets/", catalog.subnet_list, name="subnet-list"),
    path(P + "subnets/<int:pk>/delete/", catalog.subnet_delete, name="subnet-delete"),
    path(P + "ssh-keys/", catalog.ssh_key_list, name="ssh-key-list"),
    path(P + "ssh-keys/<int:pk>/delete/", catalog.ssh_key_delete, name="ssh-key-delete"),
    path("images/<int:pk>/import/<str:file_name>", image_import.image_import, name="image-import"),
    path(P + "images/", catalog.image_list, name="image-list"),
    path(P + "images/<int:pk>/delete/", catalog.image_delete, name="image-delete"),
    path(P + "images/imports/", url_imports.url_import_start, name="image-url-import"),
    path(
        P + "images/container/",
        container_images.container_image_create,
        name="image-container-add",
    ),
    path(P + "images/imports/panel/", url_imports.url_import_panel, name="image-url-imports"),
    path(
        P + "images/imports/<int:pk>/cancel/",
        url_imports.url_import_cancel,
        name="image-url-import-cancel",
    ),
    path(
        P + "images/imports/<int:pk>/retry/",
        url_imports.url_import_retry,
        name="image-url-import-retry",
    ),
    path(
        P + "images/imports/<int:pk>/dismiss/",
        url_imports.url_import_dismiss,
        name="image-url-import-dismiss",
    ),
]
