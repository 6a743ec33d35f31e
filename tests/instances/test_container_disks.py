"""Container disk pulls against a real registry on loopback: verified, cached once per digest,
and every bad input refused with what to fix, leaving nothing in the cache."""

import html
from concurrent.futures import ThreadPoolExecutor

import pytest

from instances.backends.base import BackendError
from instances.choices import DiskRole, ImageKind
from instances.containerdisks import cache
from instances.containerdisks.errors import ContainerDiskError
from instances.containerdisks.reference import parse_reference
from instances.containerdisks.skopeo import Access
from instances.models import Image, RegistryCredential
from instances.services.container_disks import (
    container_disks_ready,
    registry_access,
    registry_credential_set,
)
from instances.services.instances import DiskRequest, instance_create
from instances.specs import machine_spec
from tests.factories import ImageFactory, instance_request
from tests.instances.api.helpers import errors_of
from tests.oci_registry import PASSWORD, USER, oci_layout

PLAIN = Access(insecure=True)


@pytest.fixture(autouse=True)
def private_cache(settings, tmp_path):
    settings.ZOPDAY_IMAGES_DIR = tmp_path / "images"
    return tmp_path / "images"


def leftovers() -> list[str]:
    """What the cache holds: nothing after a failed pull, not even a lock file."""
    root = cache.cache_root()
    return sorted(p.name for p in root.iterdir()) if root.exists() else []


def refusal(reference: str, access: Access = PLAIN, **kwargs) -> ContainerDiskError:
    with pytest.raises(ContainerDiskError) as refused:
        cache.pull(parse_reference(reference), access, **kwargs)
    assert leftovers() == []
    return refused.value


def test_a_container_disk_is_pulled_once_and_shared_by_digest(demo_container_disk):
    reference, digest = demo_container_disk
    first = cache.pull(parse_reference(reference), PLAIN)
    assert first.digest == digest
    assert first.path == cache.cached_file(digest) and first.path.is_file()
    inode = first.path.stat().st_ino
    by_digest = cache.pull(parse_reference(reference.replace(":1", f"@{digest}")), PLAIN)
    assert by_digest.path.stat().st_ino == inode  # the same one copy, not pulled again
    assert leftovers() == [digest.replace(":", "-")]


def test_an_unknown_registry_host_is_named(oci_registry):
    assert "No registry host nowhere.invalid is known" in refusal("nowhere.invalid/x/y:1").message


def test_a_port_where_no_registry_answers_is_named(oci_registry):
    host, _, port = oci_registry.address.partition(":")
    error = refusal(f"{host}:{int(port) + 1}/x/y:1")
    assert "Nothing answers as a registry at" in error.message and error.retryable


def test_a_missing_login_and_refused_credentials_are_told_apart(oci_auth_registry):
    reference = f"{oci_auth_registry.address}/x/y:1"
    asked = refusal(reference)
    assert asked.field == "credentials" and "asks for a login" in asked.message
    wrong = refusal(reference, Access(insecure=True, username=USER, password="wrong"))
    assert wrong.field == "credentials"
    assert f"refused the credentials of user {USER}" in wrong.message


def test_an_image_with_no_disk_in_it_is_refused(oci_registry, tmp_path):
    oci_registry.push(oci_layout(tmp_path / "layout", {"hello.txt": b"hi\n"}), "x/nodisk:1")
    error = refusal(f"{oci_registry.address}/x/nodisk:1")
    assert "holds no disk" in error.message and "/disk/<name>.qcow2" in error.message


def test_a_layer_over_the_size_cap_is_refused_before_it_is_fetched(settings, demo_container_disk):
    settings.ZOPDAY_CONTAINER_DISK_MAX_MB = 1
    error = refusal(demo_container_disk[0])
    assert "over the 1 MB a container disk may be" in error.message


def test_a_blob_that_does_not_match_its_digest_is_refused(oci_registry, tmp_path):
    layout = oci_layout(tmp_path / "layout", {"disk/tiny.img": bytes(range(256)) * 4096})
    digest = oci_registry.push(layout, "x/damaged:1")
    manifest = cache.resolve(parse_reference(f"{oci_registry.address}/x/damaged:1"), PLAIN)[1]
    blob = oci_registry.blob(manifest["layers"][0]["digest"])
    damaged = bytearray(blob.read_bytes())
    damaged[-1] ^= 0xFF
    blob.write_bytes(bytes(damaged))
    error = refusal(f"{oci_registry.address}/x/damaged@{digest}")
    assert (
        "did not match its digest" in error.message or "does not match its digest" in error.message
    )


def test_a_tag_that_moved_between_two_pulls_is_said_to_have_moved(oci_registry, tmp_path):
    first = oci_registry.push(oci_layout(tmp_path / "a", {"disk/a.img": b"a" * 65536}), "x/mv:1")
    pulled = cache.pull(parse_reference(f"{oci_registry.address}/x/mv:1"), PLAIN)
    assert pulled.digest == first
    second = oci_registry.push(oci_layout(tmp_path / "b", {"disk/b.img": b"b" * 65536}), "x/mv:1")
    with pytest.raises(ContainerDiskError) as refused:
        cache.pull(parse_reference(f"{oci_registry.address}/x/mv:1"), PLAIN, expected=first)
    assert f"moved since this disk pulled it: it named {first} then and names {second} now" in (
        refused.value.message
    )
    assert not cache.cached_file(second).exists()


@pytest.mark.parametrize(
    "text, says",
    [
        ("ubuntu:22.04", "Start the reference with the registry's host name"),
        ("quay.io/x/y", "Give a tag or a digest"),
        ("quay.io/x/y@sha256:abc", "64 lowercase hex digits"),
        ("quay.io/X/Y:1", "is not a valid repository"),
    ],
)
def test_a_reference_that_is_not_one_says_what_to_fix(text, says):
    with pytest.raises(ContainerDiskError, match=says):
        parse_reference(text)


@pytest.mark.django_db
def test_a_projects_registry_login_is_stored_encrypted_and_used(project, owner, oci_auth_registry):
    login = registry_credential_set(
        project=project, actor=owner, registry=oci_auth_registry.address, username=USER,
        password=PASSWORD,
    )  # fmt: skip
    stored = RegistryCredential.objects.get(pk=login.pk)
    assert PASSWORD not in stored.password_encrypted and stored.password == PASSWORD
    reference = parse_reference(f"{oci_auth_registry.address}/x/y:1")
    error = refusal(str(reference), registry_access(project, reference))
    assert "has no image x/y:1" in error.message  # logged in: the image is what is missing


@pytest.mark.django_db
def test_an_admin_adds_a_registry_login_whose_password_is_never_shown(admin_client, project):
    response = admin_client.post(
        "/admin/instances/registrycredential/add/",
        {"project": project.pk, "registry": "Registry.Example.com:5000", "username": "bot",
         "new_password": "tok-123"},
    )  # fmt: skip
    assert response.status_code == 302, response.content.decode()[:2000]
    login = RegistryCredential.objects.get()
    assert (login.registry, login.password) == ("registry.example.com:5000", "tok-123")
    page = admin_client.get(f"/admin/instances/registrycredential/{login.pk}/change/")
    assert (
        "tok-123" not in page.content.decode()
        and login.password_encrypted not in page.content.decode()
    )


@pytest.mark.django_db
def test_a_container_image_is_registered_by_reference_and_a_bad_one_answered_at_its_field(
    project, api_for, oci_registry, oci_auth_registry, tmp_path
):
    oci_registry.push(oci_layout(tmp_path / "f", {"disk/fedora.img": b"f" * 4096}), "disks/f:40")
    body = {"name": "fedora", "reference": f"{oci_registry.address}/disks/f:40"}
    made = api_for("operator").post(f"/projects/{project.slug}/container-images", body)
    assert made.status_code == 201, made.content
    assert (made.json()["kind"], made.json()["reference"]) == ("container", body["reference"])
    again = {"name": "fedora", "reference": "fedora:40"}
    refused = api_for("operator").post(f"/projects/{project.slug}/container-images", again)
    assert refused.status_code == 422
    errors = errors_of(refused)
    assert errors["name"] == ["An image called fedora exists already: choose another name."]
    assert "Start the reference with the registry's host name" in errors["reference"][0]
    assert (
        api_for("viewer").post(f"/projects/{project.slug}/container-images", body).status_code
        == 403
    )
    # the registry is asked before anything is registered: each refusal at the reference
    closed = oci_registry.address.rsplit(":", 1)[0] + ":1"
    for reference, said in (
        (f"{oci_registry.address}/disks/f:41", "has no image disks/f:41"),
        (f"{closed}/disks/f:40", f"Nothing answers as a registry at {closed}"),
        (f"{oci_auth_registry.address}/disks/f:40", "asks for a login: add the project's"),
    ):
        refused = api_for("operator").post(
            f"/projects/{project.slug}/container-images", {"name": "other", "reference": reference}
        )
        assert refused.status_code == 422, reference
        assert said in errors_of(refused)["reference"][0], errors_of(refused)
    assert Image.objects.filter(kind=ImageKind.CONTAINER).count() == 1  # nothing half-made


@pytest.mark.django_db
def test_a_disk_keeps_the_digest_it_first_ran_and_says_when_its_tag_moved(
    project, operator, subnet, oci_registry, tmp_path
):
    first = oci_registry.push(oci_layout(tmp_path / "a", {"disk/a.img": b"a" * 4096}), "x/pin:1")
    image = ImageFactory(kind=ImageKind.CONTAINER, name="pin", path="",
                         reference=f"{oci_registry.address}/x/pin:1")  # fmt: skip
    request = instance_request(
        subnet,
        root_image=None,
        disks=[DiskRequest(size_gb=0, role=DiskRole.CONTAINER, image=image)],
    )
    vm = instance_create(project=project, actor=operator, request=request)
    container_disks_ready(vm, pull=False)  # as for KubeVirt: resolved, not pulled here
    disk = vm.disks.get(role=DiskRole.CONTAINER)
    assert disk.digest == first and not cache.cached_file(first).exists()
    assert machine_spec(vm).disks[-1].reference == f"{oci_registry.address}/x/pin@{first}"
    oci_registry.push(oci_layout(tmp_path / "b", {"disk/b.img": b"b" * 4096}), "x/pin:1")
    with pytest.raises(BackendError, match=f"{disk.name}: The tag of .* moved since this disk"):
        container_disks_ready(vm, pull=True)
    assert vm.disks.get(role=DiskRole.CONTAINER).digest == first
    assert leftovers() == []


def test_two_pulls_at_once_leave_one_copy(oci_registry, tmp_path):
    layout = oci_layout(tmp_path / "layout", {"disk/both.img": bytes(range(256)) * 8192})
    digest = oci_registry.push(layout, "x/both:1")
    reference = parse_reference(f"{oci_registry.address}/x/both:1")
    with ThreadPoolExecutor(max_workers=2) as pool:
        pulled = list(pool.map(lambda _: cache.pull(reference, PLAIN), range(2)))
    assert {p.path for p in pulled} == {cache.cached_file(digest)}
    assert leftovers() == [digest.replace(":", "-")]


@pytest.mark.django_db
def test_the_images_page_adds_a_container_image_and_answers_a_bad_one_at_its_field(
    project, client_for, oci_registry, tmp_path
):
    oci_registry.push(oci_layout(tmp_path / "p", {"disk/page.img": b"p" * 4096}), "disks/p:1")
    url = f"/projects/{project.slug}/images/container/"
    form = {"container-name": "paged", "container-reference": f"{oci_registry.address}/disks/p:1",
            "container-os_type": "linux", "container-description": ""}  # fmt: skip
    missing = {**form, "container-reference": f"{oci_registry.address}/disks/p:2"}
    page = client_for("operator").post(url, missing).content.decode()
    error = html.unescape(page.split('id="container-reference-error">', 1)[1].split("</p>")[0])
    assert "has no image disks/p:2: check the repository and tag." in error
    assert not Image.objects.filter(kind=ImageKind.CONTAINER).exists()
    assert client_for("viewer").post(url, form).status_code == 403
    assert client_for("operator").get(url).status_code == 405
    done = client_for("operator").post(url, form, follow=True).content.decode()
    assert "paged registered: its first instance&#x27;s host pulls it." in done
    assert Image.objects.get(kind=ImageKind.CONTAINER).reference == form["container-reference"]
