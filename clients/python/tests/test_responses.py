"""What is sent and what is stored: background tasks run after the
commit and the response (issue 30 item 8); the first response is the
view's own, cookies included (11); only allowlisted headers are stored
and replayed, never Set-Cookie (14); a response over max_response_bytes
is not recorded."""
import pytest

from helpers import ASGI, Gate, framework_of, orders_of, poll_until, post, problem_type, record, sql, unique_key


@pytest.mark.parametrize("fail", [False, True], ids=["succeeds", "fails"])
def test_background_task_runs_after_commit_and_response(app, request, fail):
    if framework_of(request) not in ASGI:
        pytest.skip("Starlette's BackgroundTask")
    key = unique_key("background")
    with Gate():  # the task waits for it: the answer comes first
        status, headers, _ = post(app, "/orders/background" + ("?fail=1" if fail else ""), key=key, body={"sku": "b"})
        assert status == 201 and "idempotent-replayed" not in headers
    poll_until(lambda: sql("SELECT count(*) FROM side_effects WHERE key = %s", [key])[0][0] == 1, "the side effect")
    # the task saw the committed record; its failure rolled nothing back
    assert sql("SELECT what, record_status FROM side_effects WHERE key = %s", [key]) == [("e-mail", "succeeded")]
    assert orders_of([key]) == {key: 1} and record(key)[0] == "succeeded"
    status, headers, _ = post(app, "/orders/background" + ("?fail=1" if fail else ""), key=key, body={"sku": "b"})
    assert status == 201 and headers["idempotent-replayed"] == "true"


def test_cookies_sent_once_never_stored_nor_replayed(app):
    key = unique_key("cookie")
    status, headers, _ = post(app, "/orders/cookie", key=key)
    assert status == 201
    assert headers["set-cookie"].startswith("session=alice-session")
    assert headers["x-internal"] == "secret" and headers["etag"] == '"v1"'
    stored = sql("SELECT result -> 'headers' FROM idempotent_record WHERE key = %s", [key])[0][0]
    assert sorted(stored) == ["content-type", "etag"]
    status, headers, _ = post(app, "/orders/cookie", key=key, tenant="default")
    assert status == 201 and headers["idempotent-replayed"] == "true"
    assert "set-cookie" not in headers and "x-internal" not in headers
    assert headers["etag"] == '"v1"'


def test_response_over_the_limit_is_not_recorded(app):
    key = unique_key("large-response")
    status, _, body = post(app, "/orders/large", key=key)
    assert status == 500 and problem_type(body) == "urn:idempotency:response-too-large"
    assert record(key) is None and orders_of([key]) == {}


# a status a replay could not send, a header value with CR LF (a split
# response): refused by idem_finish_response (22023, the response's, not
# the key's) or by the framework before it
UNSENDABLE = [{"status": 99}, {"status": 201, "headers": {"location": "/orders/1\r\nx-injected: yes"}}]


@pytest.mark.parametrize("answer", UNSENDABLE, ids=["status-99", "location-crlf"])
def test_a_response_that_cannot_be_replayed_is_the_frameworks_500(app, answer):
    key = unique_key("unsendable")
    status, headers, body = post(app, "/orders/answer-as", key=key, body=answer)
    assert status == 500 and headers.get("content-type") != "application/problem+json", body
    assert record(key) is None and orders_of([key]) == {}

