"""Statements that end a transaction, told apart from those that do not:
the claim, the handler's writes and the stored response must commit
together, so neither middleware lets the handler begin, commit, roll back
or prepare the claim's transaction itself.

The same reading as clients/node's transaction-control.js (the two are
checked against one table of cases): the first keyword of every statement,
skipping comments, quoted strings, quoted identifiers and dollar quotes.
Text without a ';' is one statement: only its start is read, so the
handler's usual statement costs a few characters, not a pass over it."""
import re

_CONTROL = re.compile(r"(?:BEGIN|START\s+TRANSACTION|COMMIT|END|ABORT|PREPARE\s+TRANSACTION"
                      r"|ROLLBACK(?!\s+(?:AND\s+NO\s+CHAIN\s+)?TO\b))\b", re.I | re.A)
_DOLLAR_TAG = re.compile(r"\$(?:[A-Za-z_\u0080-\uffff][A-Za-z0-9_\u0080-\uffff]*)?\$")
_WORD_CHARACTER = re.compile(r"[A-Za-z0-9_]")
_SPACE_OR_PAREN = re.compile(r"[\s(]*")


class TransactionEnded(Exception):
    """the handler tried to end, or ended, the claim's transaction"""

    def __init__(self):
        super().__init__("the Idempotency-Key's transaction belongs to the middleware: the handler may not begin,"
                         " commit or roll it back (use savepoints: conn.transaction(), transaction.atomic())")


def _statement_start(text, i):
    """-> index of the first character of the statement at i (white space,
    parentheses and comments skipped)"""
    while True:
        i = _SPACE_OR_PAREN.match(text, i).end()
        if text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            i = _skip_block_comment(text, i)
        else:
            return i


def _skip_block_comment(text, i):
    depth = 0
    while True:
        opening, closing = text.find("/*", i), text.find("*/", i)
        if closing < 0:
            return len(text)
        if 0 <= opening < closing:
            depth, i = depth + 1, opening + 2
        else:
            depth, i = depth - 1, closing + 2
            if depth == 0:
                return i


def _skip_quoted(text, i, quote, backslashes):
    """-> the index after the quoted string starting at i, with doubled
    quotes inside; backslash escapes too in E'' strings"""
    j = i + 1
    while True:
        end = text.find(quote, j)
        if end < 0:
            return len(text)
        if backslashes:
            n = 0
            while text[end - 1 - n] == "\\":
                n += 1
            if n % 2 == 1:
                j = end + 1
                continue
        if text[end + 1:end + 2] == quote:
            j = end + 2
            continue
        return end + 1


def _is_control(text, i):
    """is the statement starting at i transaction control? (white space
    between the words may be of any length)"""
    return _CONTROL.match(text, i) is not None


def _word_character_at(text, i):
    return i >= 0 and _WORD_CHARACTER.match(text[i]) is not None


def ends_transaction(text):
    """does any statement of text (one or several, ;-separated) begin,
    commit, roll back or prepare a transaction?"""
    i = _statement_start(text, 0)
    if _is_control(text, i):
        return True
    if ";" not in text:
        return False
    while i < len(text):
        c = text[i]
        if c == ";":
            i = _statement_start(text, i + 1)
            if _is_control(text, i):
                return True
        elif c == "'":
            escaped = i > 0 and text[i - 1] in "Ee" and not _word_character_at(text, i - 2)
            i = _skip_quoted(text, i, "'", escaped)
        elif c == '"':
            i = _skip_quoted(text, i, '"', False)
        elif text.startswith("--", i):
            end = text.find("\n", i)
            i = len(text) if end < 0 else end + 1
        elif text.startswith("/*", i):
            i = _skip_block_comment(text, i)
        elif c == "$" and not _word_character_at(text, i - 1):
            tag = _DOLLAR_TAG.match(text, i)
            if tag:
                end = text.find(tag.group(), i + len(tag.group()))
                i = len(text) if end < 0 else end + len(tag.group())
            else:
                i += 1
        else:
            i += 1
    return False
