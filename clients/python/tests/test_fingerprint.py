"""The fingerprint of a JSON request is the server's idem_fingerprint of the
jsonb array [method, path, body], sent as one text: the value earlier
versions of the package gave (jsonb_build_array of the three), and that of
the compact text clients/node sends (JSON.stringify of the array with the
parsed body), whatever the body's key order and white space, so that a
retry after an upgrade, or sent to a service in the other language,
replays instead of answering 422.  (clients/node is not run here: the
Python suite does not install Node.js.)"""
import json

import pytest

from helpers import sql
from pg_idempotency_key.core import fingerprint

JSON_REQUESTS = [
    ("POST", "/orders", b'{"sku": "a", "qty": 1}'),
    ("PATCH", "/caf\u00e9/\u2603?q=\"x\"&r=\\", '{"b": [1, 2.50, {"z": null}], "a": "\u00e9\\u00e9 \\" \\n"}'.encode()),
    ("POST", "/p", b' [1,\n 2 ] '),
    ("POST", "/p", b'"text"'),
    ("POST", "/p", b'12345678901234567890.5'),
]


def server_fingerprint(json_text):
    return sql("SELECT idem_fingerprint(%s::jsonb)", [json_text])[0][0]


@pytest.mark.parametrize("method, path, body", JSON_REQUESTS)
def test_json_fingerprint_is_the_earlier_versions(method, path, body):
    json_input, digest = fingerprint(method, path, body, "application/json")
    assert digest is None
    earlier = sql("SELECT idem_fingerprint(jsonb_build_array(%s::text, %s::text, %s::jsonb))",
                  [method, path, body.decode()])[0][0]
    assert server_fingerprint(json_input) == earlier


def test_json_fingerprint_is_that_of_the_compact_text_and_ignores_key_order_and_white_space():
    body = '{"sku": "caf\u00e9", "lines": [{"qty": 2, "n": null}], "ok": true}'
    ours = server_fingerprint(fingerprint("POST", "/orders", body.encode(), "application/json; charset=utf-8")[0])
    # what JSON.stringify([method, path, req.body]) gives for Express's parsed body
    node = json.dumps(["POST", "/orders", json.loads(body)], separators=(",", ":"), ensure_ascii=False)
    reordered = '{ "ok":true,"lines":[ {"n":null, "qty":2} ],\n"sku":"caf\\u00e9"}'
    assert server_fingerprint(node) == ours
    assert server_fingerprint(fingerprint("POST", "/orders", reordered.encode(), "application/json")[0]) == ours
    assert server_fingerprint(fingerprint("POST", "/orders/", body.encode(), "application/json")[0]) != ours


def test_bodies_jsonb_refuses_or_that_are_not_json_are_hashed_as_bytes():
    for method, path, body, content_type in [("POST", "/p", b'{"a": "\\u0000"}', "application/json"),
                                             ("POST", "/p\x00", b'{"a": 1}', "application/json"),
                                             ("POST", "/p", b'{"a": NaN}', "application/json"),
                                             ("POST", "/p", b'[1, -Infinity]', "application/json"),
                                             ("POST", "/p", b'{"a": 1', "application/json"),
                                             ("POST", "/p", b'{"a": 1}', "text/plain")]:
        json_input, digest = fingerprint(method, path, body, content_type)
        assert json_input is None and len(digest) == 32, (path, body)
