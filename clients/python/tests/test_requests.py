"""What the middleware takes a request to be: only the configured methods
of routed paths (issue 30 items 9, 10), one key on one header line (16),
a scope from the authenticated principal (13), a body read to its end
(7) and up to max_body_bytes (9); Django's multipart uploads parsed by
Django (12)."""
import hashlib
import http.client
import json
import os

import pytest

from helpers import (ASGI, app_number, framework_of, orders_of, poll_until, post, problem_type, raw_request, record,
                     sql, unique_key)


def test_only_configured_methods_are_handled(app):
    # /orders/wait has settings of its own (routes=): still POST and PATCH only
    for path in ("/orders/wait", "/orders"):
        for method in ("GET", "HEAD", "OPTIONS"):
            status, _, body = post(app, path, method=method)
            assert status == 405, (path, method, status, body)


def test_unrouted_path_passes_through_nothing_stored(app):
    key = unique_key("no-route")
    status, _, body = post(app, "/no/such/route", key=key, body={"sku": "x"})
    assert status == 404
    assert b"urn:idempotency" not in body
    assert record(key) is None


def test_body_over_the_limit_is_refused_before_the_claim(app, request):
    key = unique_key("too-large")
    status, _, body = post(app, "/orders/small", key=key, body={"sku": "x" * 2000})
    assert status == 413 and problem_type(body) == "urn:idempotency:body-too-large"
    assert record(key) is None and orders_of([key]) == {}
    assert post(app, "/orders/small", key=key, body={"sku": "x"})[0] == 201
    if framework_of(request) in ASGI:  # chunked: no Content-Length to refuse on
        chunked = unique_key("too-large-chunked")
        conn = http.client.HTTPConnection(app.split("//")[1], timeout=300)
        conn.request("POST", "/orders/small", body=iter([b'{"sku": "', b"y" * 1500, b'"}']), encode_chunked=True,
                     headers={"Idempotency-Key": chunked, "Authorization": "Bearer default",
                              "Content-Type": "application/json"})
        answer = conn.getresponse()
        assert answer.status == 413 and problem_type(answer.read()) == "urn:idempotency:body-too-large"
        conn.close()
        assert record(chunked) is None


def test_truncated_body_claims_nothing_and_the_retry_succeeds(app, request):
    if framework_of(request) not in ASGI:
        pytest.skip("the ASGI server hands the middleware the client's disconnect")
    key = unique_key("truncated")
    before = app_number(app, "/posts-finished")
    host = app.split("//")[1]
    raw_request(app, ["POST /binary HTTP/1.1", f"Host: {host}", "Content-Type: application/octet-stream",
                      "Content-Length: 100", f"Idempotency-Key: {key}", "Authorization: Bearer default"],
                b"0123456789")
    poll_until(lambda: app_number(app, "/posts-finished") > before, "the truncated request was handled")
    assert record(key) is None and orders_of([key]) == {}
    status, _, body = post(app, "/binary", key=key, body=b"0123456789" * 10, content_type="application/octet-stream")
    assert status == 200 and body.endswith(b"0123456789" * 10)
    assert orders_of([key]) == {key: 1}


def test_two_key_header_lines_are_refused(app):
    for keys in (["a", "b"], ["a", "a"]):
        conn = http.client.HTTPConnection(app.split("//")[1], timeout=300)
        conn.putrequest("POST", "/orders")
        for k in keys:
            conn.putheader("Idempotency-Key", k)
        for name, value in (("Authorization", "Bearer default"), ("Content-Type", "application/json"),
                            ("Content-Length", "2")):
            conn.putheader(name, value)
        conn.endheaders(b"{}")
        answer = conn.getresponse()
        assert answer.status == 400 and problem_type(answer.read()) == "urn:idempotency:key-invalid", keys
        conn.close()
    status, _, body = post(app, "/orders", key="a,b")
    assert status == 400 and problem_type(body) == "urn:idempotency:key-invalid"


def test_no_principal_no_scope_nothing_stored(app):
    key = unique_key("anonymous")
    status, _, body = post(app, "/orders", key=key, body={"sku": "x"}, tenant=None)
    assert status == 403 and problem_type(body) == "urn:idempotency:scope-missing"
    assert record(key) is None and orders_of([key]) == {}
    # each principal is a scope of its own
    assert post(app, "/orders", key=key, body={"sku": "x"}, tenant="alice")[0] == 201
    status, headers, _ = post(app, "/orders", key=key, body={"sku": "x"}, tenant="bob")
    assert status == 201 and "idempotent-replayed" not in headers
    assert orders_of([key]) == {key: 2}


def multipart(boundary, data, note="n"):
    parts = [f'--{boundary}\r\nContent-Disposition: form-data; name="note"\r\n\r\n{note}\r\n'.encode(),
             f'--{boundary}\r\nContent-Disposition: form-data; name="file"; filename="big.bin"\r\n'
             'Content-Type: application/octet-stream\r\n\r\n'.encode() + data + b"\r\n",
             f"--{boundary}--\r\n".encode()]
    return b"".join(parts)


def test_django_multipart_upload_larger_than_data_upload_max_memory_size(app, request):
    if framework_of(request) != "django":
        pytest.skip("Django's upload handling")
    key = unique_key("upload")
    data = os.urandom(3 * 1024 * 1024)  # over DATA_UPLOAD_MAX_MEMORY_SIZE (2.5 MB)
    upload = lambda boundary, d: post(app, "/orders/upload", key=key, body=multipart(boundary, d),  # noqa: E731
                                      content_type=f"multipart/form-data; boundary={boundary}")
    status, headers, body = upload("first-boundary", data)
    assert status == 201, body
    assert json.loads(body)["size"] == len(data)
    # the same form with another boundary is the same request: replayed
    status, headers, again = upload("another-boundary", data)
    assert status == 201 and headers["idempotent-replayed"] == "true" and again == body
    # another file under the key is another request
    status, _, refused = upload("first-boundary", data[:-1] + bytes([data[-1] ^ 1]))
    assert status == 422 and problem_type(refused) == "urn:idempotency:key-reused"
    assert orders_of([key]) == {key: 1}
    assert record(key)[0] == "succeeded"
    assert sql("SELECT sku FROM orders WHERE idempotency_key = %s", [key]) == [(hashlib.sha256(data).hexdigest(),)]
