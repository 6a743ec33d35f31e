"""instances/choices.py: each status choice set gives every member a colour the CSS knows."""

import re

import pytest
from django.template import Context, Template
from django.urls import reverse

from instances.choices import (
    COLOURS,
    CarrierState,
    ImportStatus,
    Outcome,
    PowerState,
    SyncStatus,
    colour_of,
)
from provisioning.choices import JobStatus, StepStatus
from tests.services import ROOT

pytestmark = pytest.mark.django_db

CSS = (ROOT / "static" / "css" / "zopday.css").read_text()


def test_the_status_choice_sets_of_both_apps_have_colours():
    assert set(COLOURS) == {
        Outcome,
        PowerState,
        CarrierState,
        ImportStatus,
        SyncStatus,
        JobStatus,
        StepStatus,
    }


@pytest.mark.parametrize("choices", list(COLOURS), ids=lambda choices: choices.__name__)
def test_every_member_has_a_colour_the_stylesheet_styles(choices):
    assert set(COLOURS[choices]) == set(choices)
    for colour in set(COLOURS[choices].values()) - {"grey"}:  # grey: the plain badge
        assert re.search(rf"\.badge\.{colour}\b[^{{]*\{{", CSS), colour


def test_a_template_takes_the_colour_from_the_choice_set():
    template = Template('{% load colours %}{{ a|colour:"PowerState" }} {{ b|colour:"JobStatus" }}')
    assert template.render(Context({"a": "starting", "b": "ready"})) == "orange green"
    assert colour_of(PowerState, "no-such-state") == "grey"


def test_the_instance_list_colours_each_state(client_for, project, running):
    text = client_for("viewer").get(reverse("instance-list", args=[project.slug])).text
    assert 'class="badge state green" data-state="running"' in text
