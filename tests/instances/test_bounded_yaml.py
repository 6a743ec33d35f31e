"""Untrusted YAML is read within bounds: an alias, nesting too deep, a text too long or a number
too long is a YAML error at its line, whatever reads it."""

import pytest
import yaml

from instances.bounded_yaml import MAX_BYTES, yaml_compose, yaml_load, yaml_problem
from tests.yaml_bombs import billion_laughs, nested


def problem_of(text: str) -> str:
    with pytest.raises(yaml.YAMLError) as raised:
        yaml_load(text)
    return yaml_problem(raised.value)


def test_the_billion_laughs_is_refused_at_its_first_alias():
    assert problem_of("# a comment\n" + billion_laughs()) == (
        "Aliases (*l0) are not accepted: write the value out where it is used (line 3)."
    )
    with pytest.raises(yaml.YAMLError):
        yaml_compose(billion_laughs())


def test_a_merge_key_naming_an_anchor_is_an_alias_too():
    assert problem_of("base: &base {a: 1}\nweb:\n  <<: *base\n").startswith(
        "Aliases (*base) are not accepted"
    )


def test_nesting_ten_thousand_deep_is_a_message_not_a_traceback():
    expected = "Lists and mappings nest over 64 levels deep here: keep to a few levels (line 2)."
    assert problem_of("ok: 1\nruncmd: " + nested() + "\n") == expected
    blocks = "".join(" " * level + "- \n" for level in range(100))  # block style: no libyaml cap
    assert problem_of(blocks) == expected.replace("line 2", "line 65")


def test_a_text_over_the_size_bound_is_refused_before_it_is_read():
    assert problem_of("x" * (MAX_BYTES + 1)) == (
        "The text is over 5 MiB: split it into smaller files."
    )


def test_a_number_too_long_for_python_is_a_yaml_error_at_its_line():
    assert problem_of("a: 1\nb: " + "9" * 5000 + "\n") == (
        "Invalid YAML (line 2, column 4): a number too long to read."
    )


def test_anchors_nesting_and_text_within_the_bounds_read_as_safe_load_reads_them():
    text = "a: &unused [1, {b: [2, 3]}]\nc: 2026-12-07\nd: 0x1f\n" + "e: " + nested(60) + "\n"
    assert yaml_load(text) == yaml.safe_load(text)
    assert yaml_load("") is None
