"""Who may send an upload-sized body: the web server asks before it stores one."""

import pytest
from django.test import Client

from instances.services.tokens import api_token_create
from instances.services.uploads import upload_allowed

pytestmark = pytest.mark.django_db
PAGE, API = "/projects/alpha/images/", "/api/v1/projects/alpha/images"


def session_cookie(user) -> str:
    client = Client()
    client.force_login(user)
    return f"theme=dark; sessionid={client.cookies['sessionid'].value}"


def bearer(user) -> str:
    return "Bearer " + api_token_create(user=user, name="upload")[1]


def allowed(path: str, cookie: str = "", authorization: str = "") -> bool:
    return upload_allowed(path=path, cookie_header=cookie, authorization_header=authorization)


def test_an_operators_session_may_upload_on_the_page_and_through_the_api(operator):
    assert allowed(PAGE, session_cookie(operator))
    assert allowed(API, session_cookie(operator))


def test_an_operators_token_may_upload_through_the_api_only(operator):
    assert allowed(API, authorization=bearer(operator))
    assert not allowed(PAGE, authorization=bearer(operator))


def test_a_made_up_session_or_token_may_not(operator):
    assert not allowed(PAGE, "sessionid=x")
    assert not allowed(API, authorization="Bearer zop_" + "x" * 43)
    assert not allowed(API, authorization="Basic b3BlcmF0b3I6eA==")


def test_a_bad_token_is_not_saved_by_a_good_session(operator):
    """As the API: a token that is shown decides, whatever session came along."""
    assert not allowed(API, session_cookie(operator), "Bearer zop_" + "x" * 43)


def test_a_viewer_or_an_outsider_may_not(viewer, outsider):
    assert not allowed(PAGE, session_cookie(viewer))
    assert not allowed(API, authorization=bearer(viewer))
    assert not allowed(PAGE, session_cookie(outsider))


def test_a_session_whose_password_changed_since_may_not(operator):
    cookie = session_cookie(operator)
    operator.set_password("another-horse-battery")
    operator.save()
    assert not allowed(PAGE, cookie)


def test_only_the_image_upload_paths_may(operator, project):
    cookie = session_cookie(operator)
    assert not allowed("/login/", cookie)
    assert not allowed("/projects/alpha/instances/", cookie)
    assert not allowed("/projects/nowhere/images/", cookie)
