"""Seed the demo: an admin login, a project `demo` with one member of each role, the demo guest
image, a subnet and a stopped instance on the local QEMU backend. Safe to rerun."""

import secrets

from django.conf import settings
from django.contrib.auth import get_user_model
from django.contrib.auth.models import AbstractBaseUser
from django.core.management.base import BaseCommand

from instances.choices import ImageKind, Role
from instances.models import Image, Instance, Project, Subnet
from instances.services import membership_set, project_create
from instances.services.instances import InstanceRequest, NicRequest, instance_create
from instances.services.network import subnet_create

DEMO_MEMBERS = {
    "demo-admin": Role.ADMIN,
    "demo-operator": Role.OPERATOR,
    "demo-viewer": Role.VIEWER,
}


class Command(BaseCommand):
    help = "Create the demo logins and project if they are missing, then print the logins."

    def handle(self, *args: object, **options: object) -> None:
        password = self._demo_password()
        User = get_user_model()
        admin, created = User.objects.get_or_create(
            username="admin", defaults={"is_staff": True, "is_superuser": True}
        )
        if created:
            admin.set_password(password)
            admin.save()

        project = Project.objects.filter(slug="demo").first()
        if project is None:
            project = project_create(slug="demo", name="Demo", actor=admin)
        for username, role in DEMO_MEMBERS.items():
            user, created = User.objects.get_or_create(username=username)
            if created:
                user.set_password(password)
                user.save()
                membership_set(project=project, user=user, role=role, actor=admin)

        self._seed_instance(project, admin)
        self.stdout.write(
            f"Logins (password {password}): admin (superuser), "
            + ", ".join(f"{name} ({role.label.lower()})" for name, role in DEMO_MEMBERS.items())
        )

    def _seed_instance(self, project: Project, admin: AbstractBaseUser) -> None:
        image, _ = Image.objects.get_or_create(
            name="ZopDay demo guest",
            project=None,
            defaults={
                "kind": ImageKind.KERNEL,
                "path": "demo",
                "description": "Debian kernel + busybox: boots to a serial shell in seconds.",
            },
        )
        subnet = Subnet.objects.filter(project=project, name="default").first()
        if subnet is None:
            subnet = subnet_create(
                project=project, actor=admin, name="default", zone=settings.ZOPDAY_ZONES[0],
                cidr_v4="10.77.0.0/24", dns_resolvers="10.77.0.1",
            )  # fmt: skip
        if not Instance.objects.filter(project=project, name="demo-vm").exists():
            request = InstanceRequest(
                name="demo-vm", zone=subnet.zone, root_image=image, root_size_gb=1,
                nics=[NicRequest(subnet=subnet)],
            )  # fmt: skip
            instance_create(project=project, actor=admin, request=request)

    def _demo_password(self) -> str:
        """One random password for the demo logins, kept in the run folder for reruns to print."""
        path = settings.RUN_DIR / "demo-password"
        if not path.exists():
            path.write_text(secrets.token_urlsafe(12))
            path.chmod(0o600)
        return path.read_text().strip()
