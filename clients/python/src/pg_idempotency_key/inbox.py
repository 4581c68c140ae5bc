"""The inbox shared by the outbox's consumer and the Celery decorator: a
message's effect runs in the transaction that claims its ID with
idem_once, so it commits once per ID, however often the message comes."""
import psycopg
from psycopg.pq import TransactionStatus

INBOX_CLAIM = "SELECT idem_once(%s, scope => %s, ttl => %s::interval)"


class TransactionEnded(RuntimeError):
    """The handler ended the claim's transaction itself (COMMIT, ROLLBACK as SQL)."""


def once(pool, message_id, scope, ttl, effect):
    """(True, effect(conn)) once the effect ran and committed with the
    claim; (False, None) when message_id committed before in scope (the
    effect not run).  Raises what the effect or the database raised, with
    nothing committed."""
    ran = False
    result = None
    with pool.connection() as conn:
        # psycopg refuses conn.commit() and conn.rollback() inside this block
        with conn.transaction():
            if not conn.execute(INBOX_CLAIM, (message_id, scope, ttl)).fetchone()[0]:
                raise psycopg.Rollback()
            result = effect(conn)
            if conn.info.transaction_status != TransactionStatus.INTRANS:
                raise TransactionEnded("the handler ended the claim's transaction; "
                                       "later statements ran outside it")
            ran = True
    return ran, result
