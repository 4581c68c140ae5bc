"""Settings refused at setup (issue 30 items 13, 14): no scope, an empty
one, and Set-Cookie among the stored headers."""
import pytest

from pg_idempotency_key import Options


@pytest.mark.parametrize("settings", [{}, {"scope": ""}, {"scope": None}], ids=["none", "empty", "null"])
def test_scope_is_required(settings):
    with pytest.raises(ValueError, match="scope option is required"):
        Options(**settings)


@pytest.mark.parametrize("name", ["set-cookie", "Set-Cookie", "set-cookie2"])
def test_set_cookie_is_never_stored(name):
    with pytest.raises(ValueError, match="may not list set-cookie"):
        Options(scope="shop", stored_headers=("content-type", name))


def test_defaults():
    o = Options(scope=lambda request: None)
    assert o.scope_of({}) is None
    assert Options(scope="shop").scope_of({}) == "shop"
    assert o.stored_headers == ("content-type", "content-language", "content-location", "location", "etag",
                                "last-modified", "link", "cache-control", "vary")
    assert o.max_body_bytes == o.max_response_bytes == 10 * 1024 * 1024
