"""ends_transaction against the table of cases that clients/node's
endsTransaction is checked against too: both packages refuse the same
statements on the claim's transaction."""
import json
from pathlib import Path

import pytest

from pg_idempotency_key.transaction_control import ends_transaction

CASES = json.loads((Path(__file__).resolve().parents[2] / "test-cases" / "transaction_control.json").read_text())


@pytest.mark.parametrize("text,ends", CASES, ids=[json.dumps(text) for text, _ in CASES])
def test_ends_transaction(text, ends):
    assert ends_transaction(text) is ends
