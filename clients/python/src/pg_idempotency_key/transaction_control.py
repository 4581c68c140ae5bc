"""Statements that end a transaction, told apart from those that do not:
the claim, the handler's writes and the stored response must commit
together, so neither middleware lets the handler begin, commit, roll back
or prepare the claim's transaction itself."""
import re

_TOKENS = re.compile(r"""
    (?P<skip> --[^\n]*  |  /\*.*?\*/  |  '(?:[^']|'')*'  |  "(?:[^"]|"")*"  |  \$(?P<tag>[A-Za-z_]*)\$.*?\$(?P=tag)\$ )
  | (?P<end> ; )
  | (?P<word> [A-Za-z_]+ )
  | (?P<other> . )""", re.S | re.X)
_ENDING = {"BEGIN", "START", "COMMIT", "END", "ROLLBACK", "ABORT"}


class TransactionEnded(Exception):
    """the handler tried to end, or ended, the claim's transaction"""

    def __init__(self):
        super().__init__("the Idempotency-Key's transaction belongs to the middleware: the handler may not begin,"
                         " commit or roll it back (use savepoints: conn.transaction(), transaction.atomic())")


def ends_transaction(text):
    """does any statement of text (one or several, ;-separated) begin,
    commit, roll back or prepare a transaction?"""
    words = []  # the first two words of the statement being read
    for m in _TOKENS.finditer(text):
        if m.group("end"):
            if words and _ends(words):
                return True
            words = []
        elif m.group("skip") or (m.group("other") or "x").isspace():
            continue
        elif len(words) < 2:
            words.append((m.group("word") or "").upper())
    return bool(words) and _ends(words)


def _ends(words):
    first, second = words[0], (words[1] if len(words) > 1 else "")
    if first in ("ROLLBACK", "ABORT"):
        return second != "TO"  # ROLLBACK TO SAVEPOINT keeps the transaction
    if first == "PREPARE":
        return second == "TRANSACTION"
    return first in _ENDING
