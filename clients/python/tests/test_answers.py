"""One mapping of cases to HTTP answers in every package: each problem
the Python package answers has the status, type and title of the Node.js
package's for the same type (clients/node/src/answers.js, read as text)."""
import json
import os
import re

from pg_idempotency_key.core import (Options, answer_of, body_too_large, check_key, handler_timeout, in_progress,
                                     response_too_large, scope_missing, transaction_ended, unavailable)

NODE = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "node", "src", "answers.js")


def node_answers():
    with open(NODE, encoding="utf-8") as f:
        text = f.read()
    found = re.findall(r"problem\((\d+), '([a-z-]+)', '([^']+)'", text)
    return {kind: (int(status), title) for status, kind, title in found}


def python_answers():
    o = Options(scope="s", lease=30)
    problems = [check_key([], o), check_key(["a", "b"], o), scope_missing(), body_too_large(o),
                response_too_large(o), transaction_ended(), handler_timeout(o), in_progress(1), unavailable(),
                *(answer_of(code) for code in ("IK001", "IK002", "42501", "25006", "40001", "22023"))]
    answers = {}
    for p in problems:
        body = json.loads(p.body)
        answers[body["type"].split(":")[-1]] = (p.status, body["title"])
    return answers


def test_every_python_answer_is_the_node_packages():
    node, python = node_answers(), python_answers()
    assert len(python) == 14 and len(node) >= 14
    assert {kind: node.get(kind) for kind in python} == python
