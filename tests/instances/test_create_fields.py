"""The create form and the services' request take the fields the API declares in InstanceIn."""

import dataclasses

from pydantic_core import PydanticUndefined

from instances.api.schemas import DiskIn, InstanceIn, NicIn
from instances.choices import RunStrategy
from instances.forms import DiskAddForm, DiskRowForm, InstanceForm, NicRowForm
from instances.manifests.schemas import InstanceSpec
from instances.services.instances import DiskRequest, InstanceRequest, NicRequest


def test_the_create_form_has_every_field_of_the_api_but_the_rows():
    api_fields = set(InstanceIn.model_fields) - {"disks", "nics"}
    assert api_fields <= set(InstanceForm.base_fields)
    assert set(InstanceForm.base_fields) - api_fields == {"cdrom_image", "container_image"}


def test_the_row_forms_have_the_fields_marked_in_their_schemas():
    assert list(DiskRowForm.base_fields) == ["size_gb", "bus", "name"]
    assert list(NicRowForm.base_fields) == ["subnet", "ipv4", "ipv6", "mac", "model"]
    assert set(DiskRowForm.base_fields) <= set(DiskIn.model_fields)
    assert set(NicRowForm.base_fields) <= set(NicIn.model_fields)


def test_a_form_field_takes_its_default_from_the_schema_and_its_limits_from_its_mark():
    vcpus, sockets = InstanceForm.base_fields["vcpus"], InstanceForm.base_fields["sockets"]
    assert vcpus.initial == InstanceIn.model_fields["vcpus"].default and vcpus.required
    assert (sockets.min_value, sockets.max_value, sockets.required) == (1, 32, False)  # type: ignore[attr-defined]
    assert InstanceForm.base_fields["run_strategy"].initial == RunStrategy.MANUAL


def test_a_form_subclass_still_overrides_a_marked_field():
    assert DiskAddForm.base_fields["name"].max_length == 72  # type: ignore[attr-defined]
    assert DiskRowForm.base_fields["name"].max_length == 63  # type: ignore[attr-defined]


def test_the_services_request_has_the_api_fields_and_defaults():
    for request, schema in (
        (InstanceRequest, InstanceIn),
        (DiskRequest, DiskIn),
        (NicRequest, NicIn),
    ):
        fields = {field.name: field for field in dataclasses.fields(request)}
        assert list(fields) == list(schema.model_fields), request.__name__
        for name, info in schema.model_fields.items():
            field = fields[name]
            if field.default_factory is not dataclasses.MISSING:
                assert field.default_factory() == info.default == [], name
            elif field.default is dataclasses.MISSING:
                assert info.default is PydanticUndefined or name == "root_image", name
            else:
                assert field.default == info.default, name


def test_a_manifest_takes_the_api_fields():
    assert set(InstanceSpec.model_fields) == set(InstanceIn.model_fields)
