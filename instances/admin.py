from typing import cast

from django.contrib import admin
from django.contrib.auth.models import User
from django.db.models import Count, QuerySet
from django.http import HttpRequest

from instances import (
    actions,
    admin_clusters,  # noqa: F401  (registers ClusterAdmin)
    admin_gitops,  # noqa: F401  (registers GitSourceAdmin)
    admin_images,  # noqa: F401  (registers ImageAdmin)
    admin_outbox,  # noqa: F401  (registers OutboxMessageAdmin)
    admin_registries,  # noqa: F401  (registers RegistryCredentialAdmin)
    admin_users,  # noqa: F401  (registers users, groups, tokens and login history)
)
from instances.access import project_role
from instances.admin_scope import ProjectScopedAdmin
from instances.choices import Role
from instances.models import (
    AuditEvent,
    ConsoleSession,
    ConsoleTicket,
    Disk,
    DiskSnapshot,
    ElasticIP,
    GuestReport,
    ImageImport,
    Instance,
    IPLease,
    ManagedObject,
    Membership,
    NetworkInterface,
    Project,
    SSHKey,
    Subnet,
)
from instances.redaction import user_data_redacted
from instances.services.instances import instance_delete


class ShownOnly:
    """Objects the product changes through its services (IPAM, the hypervisor, the audit trail):
    the admin shows them; their instance's page changes them."""

    def has_add_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_change_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False

    def has_delete_permission(self, request: HttpRequest, obj: object = None) -> bool:
        return False


class MembershipInline(admin.TabularInline):
    """Members are the project admins' to change."""

    model = Membership
    extra = 0
    autocomplete_fields = ["user"]

    def _admin_of(self, request: HttpRequest, obj: Project | None) -> bool:
        role = project_role(request.user, obj) if obj is not None else None
        return bool(request.user.is_superuser or (role and role.allows(Role.ADMIN)))

    def has_add_permission(self, request: HttpRequest, obj: Project | None = None) -> bool:
        return super().has_add_permission(request, obj) and self._admin_of(request, obj)

    def has_change_permission(self, request: HttpRequest, obj: Project | None = None) -> bool:  # type: ignore[override]
        return super().has_change_permission(request, obj) and self._admin_of(request, obj)

    def has_delete_permission(self, request: HttpRequest, obj: Project | None = None) -> bool:  # type: ignore[override]
        return super().has_delete_permission(request, obj) and self._admin_of(request, obj)


@admin.register(Project)
class ProjectAdmin(ProjectScopedAdmin):
    project_path = ""
    change_role = Role.ADMIN
    list_display = ["name", "slug", "member_count", "created_at"]
    search_fields = ["name", "slug"]
    prepopulated_fields = {"slug": ["name"]}
    inlines = [MembershipInline]

    def get_queryset(self, request: HttpRequest) -> QuerySet[Project]:
        return super().get_queryset(request).annotate(member_total=Count("memberships"))

    @admin.display(description="Members", ordering="member_total")
    def member_count(self, project: Project) -> int:
        return project.member_total  # type: ignore[attr-defined]


@admin.register(Membership)
class MembershipAdmin(ProjectScopedAdmin):
    change_role = Role.ADMIN
    list_display = ["user", "project", "role", "created_at"]
    list_filter = ["role", "project"]
    search_fields = ["user__username", "project__name", "project__slug"]
    autocomplete_fields = ["user", "project"]


@admin.register(AuditEvent)
class AuditEventAdmin(ProjectScopedAdmin):
    """The audit trail is read-only: it records what happened."""

    list_display = ["created_at", "actor_name", "action", "target_repr", "outcome", "project"]
    list_filter = ["outcome", "action", "project"]
    search_fields = ["actor_name", "action", "target_repr", "message"]
    date_hierarchy = "created_at"

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


class DiskInline(ShownOnly, admin.TabularInline):
    model = Disk
    extra = 0
    fields = ["name", "role", "size_gb", "bus", "image", "boot_order"]
    show_change_link = True


class NicInline(ShownOnly, admin.TabularInline):
    model = NetworkInterface
    extra = 0
    fields = [
        "index",
        "subnet",
        "ip_mode",
        "ipv4",
        "ipv6",
        "mac",
        "model",
        "link_desired",
        "carrier",
    ]
    show_change_link = True


@admin.register(Instance)
class InstanceAdmin(ProjectScopedAdmin):
    list_display = [
        "name",
        "project",
        "zone",
        "power_state",
        "run_strategy",
        "vcpus",
        "memory_gb",
        "host",
    ]
    list_filter = ["power_state", "run_strategy", "zone", "bootloader", "project"]
    search_fields = ["name", "project__slug", "nics__ipv4", "nics__mac"]
    list_select_related = ["project"]
    # where the machine lives is fixed at creation (its disks share the zone; its files are on
    # the host); its power state and run strategy change through their services, which act
    readonly_fields = [
        "project",
        "zone",
        "backend",
        "host",
        "run_strategy",
        "power_state",
        "power_message",
        "last_exit",
        "auto_restarts",
        "state_changed_at",
    ]
    exclude = ["initial_password"]
    filter_horizontal = ["ssh_keys"]
    inlines = [DiskInline, NicInline]

    def _reads_user_data(self, request: HttpRequest, obj: Instance | None) -> bool:
        """As on the User data tab: a project admin reads it as written, others redacted."""
        return obj is None or bool(
            actions.view_password(obj, project_role(request.user, obj.project))
        )

    def get_exclude(self, request: HttpRequest, obj: Instance | None = None) -> list[str]:
        hidden = ["initial_password"]
        return hidden if self._reads_user_data(request, obj) else [*hidden, "custom_user_data"]

    def get_readonly_fields(self, request: HttpRequest, obj: Instance | None = None) -> list[str]:
        shown = list(self.readonly_fields)
        return shown if self._reads_user_data(request, obj) else [*shown, "user_data_shown"]

    @admin.display(description="Custom user data (credentials hidden)")
    def user_data_shown(self, instance: Instance) -> str:
        return user_data_redacted(instance.custom_user_data) if instance.custom_user_data else ""

    def has_add_permission(self, request: HttpRequest) -> bool:
        return False  # the Instances page and the API validate the whole request, disks and NICs

    def has_delete_permission(self, request: HttpRequest, obj: Instance | None = None) -> bool:
        """The product's Delete, by its rule (a stopped local instance, a project admin); never
        in bulk, where the rule could not be applied to each instance."""
        if obj is None or not super().has_delete_permission(request, obj):
            return False
        return bool(actions.delete(obj, project_role(request.user, obj.project)))

    def get_deleted_objects(self, objs, request):  # type: ignore[no-untyped-def]
        """Its interfaces and leases go with it, by the Delete rule, though they are not deleted
        one by one here."""
        deleted, counts, _, protected = super().get_deleted_objects(objs, request)
        return deleted, counts, set(), protected

    def delete_model(self, request: HttpRequest, obj: Instance) -> None:
        instance_delete(instance=obj, actor=cast(User, request.user))  # the admin's: staff only


@admin.register(Subnet)
class SubnetAdmin(ProjectScopedAdmin):
    list_display = ["name", "project", "zone", "cidr_v4", "cidr_v6", "gateway"]
    list_filter = ["zone", "project"]
    search_fields = ["name", "cidr_v4", "cidr_v6", "project__slug"]
    list_select_related = ["project"]

    def get_readonly_fields(self, request: HttpRequest, obj: Subnet | None = None) -> list[str]:
        """Its addresses are IPAM's once it exists: leases were made inside them."""
        return ["project", "zone", "cidr_v4", "cidr_v6", "gateway"] if obj is not None else []


@admin.register(IPLease)
class IPLeaseAdmin(ShownOnly, ProjectScopedAdmin):
    project_path = "subnet__project"
    list_display = ["address", "subnet", "nic", "created_at"]
    list_filter = ["subnet__project"]
    search_fields = ["address", "nic__mac", "nic__instance__name"]
    list_select_related = ["subnet", "nic__instance"]


@admin.register(NetworkInterface)
class NetworkInterfaceAdmin(ShownOnly, ProjectScopedAdmin):
    project_path = "instance__project"
    list_display = ["__str__", "subnet", "ipv4", "ipv6", "mac", "model", "link_desired", "carrier"]
    list_filter = ["model", "link_desired", "carrier", "ip_mode"]
    search_fields = ["mac", "ipv4", "ipv6", "instance__name"]
    list_select_related = ["instance", "subnet"]


@admin.register(ElasticIP)
class ElasticIPAdmin(ShownOnly, ProjectScopedAdmin):
    list_display = ["address", "project", "nic", "allocated_at"]
    list_filter = ["project"]
    search_fields = ["address", "nic__ipv4", "nic__instance__name"]
    list_select_related = ["project", "nic__instance"]


@admin.register(GuestReport)
class GuestReportAdmin(ShownOnly, ProjectScopedAdmin):
    project_path = "instance__project"
    list_display = ["instance", "hostname", "memory_total_kb", "reported_at", "asked_at", "error"]
    search_fields = ["instance__name", "hostname"]
    list_select_related = ["instance"]


@admin.register(SSHKey)
class SSHKeyAdmin(ProjectScopedAdmin):
    list_display = ["name", "project", "fingerprint", "created_at"]
    list_filter = ["project"]
    search_fields = ["name", "fingerprint", "public_key"]
    readonly_fields = ["fingerprint"]


@admin.register(ImageImport)
class ImageImportAdmin(ShownOnly, ProjectScopedAdmin):
    """Imports run in a worker and are cancelled from the Images page; shown here to trace one."""

    list_display = ["name", "project", "status", "bytes_done", "bytes_total", "created_at"]
    list_filter = ["status", "format", "project"]
    search_fields = ["name", "url", "project__slug"]
    list_select_related = ["project"]


@admin.register(ManagedObject)
class ManagedObjectAdmin(ShownOnly, ProjectScopedAdmin):
    """What `apply` manages, and so what `apply --prune` may remove: changed only by apply."""

    list_display = ["kind", "name", "project", "applied_at"]
    list_filter = ["kind", "project"]
    search_fields = ["name", "project__slug"]
    list_select_related = ["project"]


@admin.register(Disk)
class DiskAdmin(ShownOnly, ProjectScopedAdmin):
    list_display = ["name", "project", "zone", "role", "size_gb", "bus", "instance", "image"]
    list_filter = ["role", "bus", "zone", "project"]
    search_fields = ["name", "instance__name", "project__slug"]
    list_select_related = ["project", "instance", "image"]


@admin.register(DiskSnapshot)
class DiskSnapshotAdmin(ShownOnly, ProjectScopedAdmin):
    project_path = "disk__project"
    list_display = ["name", "disk", "state", "consistent", "created_at"]
    list_filter = ["state", "consistent"]
    search_fields = ["name", "disk__name"]
    list_select_related = ["disk"]


@admin.register(ConsoleSession)
class ConsoleSessionAdmin(ProjectScopedAdmin):
    """Console sessions are audit records: read-only here (replay recordings from the
    instance's Console recordings page)."""

    list_display = [
        "started_at",
        "username",
        "instance_name",
        "kind",
        "read_only",
        "ended_at",
        "bytes_to_guest",
        "bytes_from_guest",
    ]
    list_filter = ["kind", "read_only", "project"]
    search_fields = ["username", "instance_name", "project__slug", "recording"]
    date_hierarchy = "started_at"
    list_select_related = ["project"]

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False


@admin.register(ConsoleTicket)
class ConsoleTicketAdmin(ProjectScopedAdmin):
    project_path = "instance__project"
    """Tickets are made by the console pages and used within a minute; only their hashes are
    stored, so there is nothing to copy from here."""

    list_display = [
        "created_at",
        "user",
        "instance",
        "kind",
        "read_only",
        "expires_at",
        "claimed_at",
    ]
    list_filter = ["kind", "read_only"]
    search_fields = ["user__username", "instance__name", "kind"]
    list_select_related = ["user", "instance"]

    def has_add_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False

    def has_change_permission(self, request, obj=None) -> bool:  # type: ignore[no-untyped-def]
        return False
