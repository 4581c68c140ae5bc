"""The claim on an SQLAlchemy Engine (psycopg2, SQLAlchemy 1.4 with
future=True or 2.x), with an ORM Session bound to the claim's transaction:
the framework-independent part of flask.py and sqlalchemy_asgi.py.

One connection of the engine's pool carries the request, in
the driver's autocommit mode, so that it sends no BEGIN or COMMIT of its own,
and the middleware sends "BEGIN; claim" and "finish; COMMIT" (one round
trip each, as the psycopg 3 middleware does).  The handler's
Session is bound to that connection: session.commit() flushes and commits
nothing (the commit comes with the stored response); session.rollback()
would leave the flushed writes in place, so it ends the request with
500 transaction-ended, as a COMMIT, ROLLBACK or BEGIN sent through the
Session (refused before it is sent) does.  The Session sends nothing the
ORM would not send without the package."""
import time

from sqlalchemy import event
from sqlalchemy.exc import TimeoutError as PoolTimeout
from sqlalchemy.orm import Session

from .core import (Response, answer_of_error, claim_row, claim_sql, failure_answer, finish_sql, keeps,
                   not_claimed, response_too_large, sqlstate_of, transaction_ended, unavailable, with_retries)
from .transaction_control import TransactionEnded, ends_transaction

TOO_LARGE = object()  # what a framework's run gives for a response over max_response_bytes
_IDLE = 0  # psycopg2.extensions.TRANSACTION_STATUS_IDLE: no transaction open on the server


class Idempotency:
    """What the handler gets (Flask: g.idempotency; ASGI:
    request.state.idempotency): key, scope, and session, the Session (or
    AsyncSession) in the claim's transaction, on conn (a Connection; for an
    AsyncSession, its AsyncConnection's sync_connection)."""

    def __init__(self, conn, key, scope, session):
        self.key, self.scope = key, scope
        self.ended = False          # the handler sent, or tried to send, COMMIT / ROLLBACK / BEGIN
        self.rolled_back = False    # the handler called session.rollback()
        conn.info["idempotency"] = self
        self.session = session
        event.listen(getattr(session, "sync_session", session), "after_soft_rollback", self._after_rollback)

    def _after_rollback(self, session, previous_transaction):
        if not previous_transaction.nested:  # a savepoint's rollback is fine
            self.rolled_back = True

    def _close(self):
        """the request is over: the Session's connection is closed (SQLAlchemy
        then refuses its statements: ResourceClosedError)"""
        self.session.close()


def guard(engine):
    """the engine's Sessions of a request may not end the claim's transaction"""
    if not event.contains(engine, "before_cursor_execute", _guard):
        event.listen(engine, "before_cursor_execute", _guard)


def _guard(conn, cursor, statement, parameters, context, executemany):
    """before_cursor_execute of the engine: a Session of a request may not
    end the claim's transaction"""
    handle = conn.info.get("idempotency") if conn is not None else None
    if handle is None:
        return
    if handle.ended or ends_transaction(statement):
        handle.ended = True
        raise TransactionEnded()


class SessionFlow:
    """claim, run, record and commit a request on engine's connections"""

    def __init__(self, engine, session_options=None):
        self.engine = engine
        self.session_options = dict(session_options or {})
        guard(engine)

    @staticmethod
    def refuse_lease(o):
        if o is not False and o.lease is not None:
            raise ValueError("leased claims (lease=...) are not available with SQLAlchemy sessions: the claim,"
                             " the handler's writes and the stored response commit in one transaction")

    def handle(self, o, request, run):
        """request: (key or None, scope name, fingerprint); run(handle) ->
        the handler's Response (or TOO_LARGE), raising what the handler
        raised -> the Response to send (the handler's own object when it is
        the one)"""
        return with_retries(o, lambda: self._attempt(o, request, run))

    def _connect(self):
        """-> a connection of the engine's pool, the driver's autocommit on
        (psycopg2 sends nothing for it; SQLAlchemy's isolation_level
        "AUTOCOMMIT" would cost a SET when the pool resets it)"""
        conn = self.engine.connect()
        conn.connection.dbapi_connection.autocommit = True
        return conn

    @staticmethod
    def _close(conn):
        """gives the connection back to the pool, out of autocommit"""
        try:
            dbapi = conn.connection.dbapi_connection
            if dbapi is not None and not dbapi.closed:
                dbapi.autocommit = False
        except Exception:  # a closed or invalidated connection: the pool replaces it
            pass
        conn.close()

    @staticmethod
    def _send(conn, sql, params=None):
        """sql on the driver's connection, past SQLAlchemy's bookkeeping"""
        cur = conn.connection.dbapi_connection.cursor()
        cur.execute(sql, params)
        return cur

    @staticmethod
    def _status(conn):
        return conn.connection.dbapi_connection.info.transaction_status

    def _end(self, conn, handle=None):
        """rolls back and gives the connection back; a broken connection is
        thrown away"""
        if handle is not None:
            handle._close()
            conn.info.pop("idempotency", None)
        try:
            if self._status(conn) != _IDLE:
                self._send(conn, "ROLLBACK")
        except Exception as exc:
            if sqlstate_of(exc) and sqlstate_of(exc).startswith("08"):
                conn.invalidate()
        self._close(conn)

    def _attempt(self, o, request, run):
        key, scope_name, fp = request
        try:
            conn = self._connect()
        except PoolTimeout:  # every connection of the engine's pool is taken, past its pool_timeout
            return unavailable()
        except Exception as exc:
            answer = answer_of_error(exc)
            if answer is None:
                raise
            return answer
        try:
            if key is None:
                self._send(conn, "BEGIN")
            else:
                claimed = self._claim(o, conn, key, scope_name, fp)
                if claimed is not None:
                    self._close(conn)
                    return claimed
        except Exception as exc:
            self._end(conn)
            answer = failure_answer(exc)
            if answer is None:
                raise
            return answer
        session = Session(bind=conn, future=True, **self.session_options)
        return self._run(o, conn, Idempotency(conn, key, scope_name, session), run)

    def _claim(self, o, conn, key, scope_name, fp):
        """-> None once conn holds the claim, or the Response to send"""
        deadline = time.monotonic() + o.wait_for
        sql, params = claim_sql(o, key, scope_name, fp)
        polls = 0
        while True:
            outcome, result, _, _, retry_after = claim_row(self._send(conn, "BEGIN; " + sql, params).fetchone())
            if outcome == "claimed":
                return None
            self._send(conn, "ROLLBACK")
            answer = not_claimed(o, outcome, result, retry_after, polls, deadline, time.monotonic())
            polls += 1
            if isinstance(answer, Response):
                return answer
            time.sleep(answer)

    def _run(self, o, conn, handle, run):
        try:
            response = run(handle)
        except Exception as exc:
            self._end(conn, handle)
            answer = failure_answer(exc, own=False, ended=handle.ended)
            if answer is None:
                raise
            return answer
        except BaseException:  # cancelled: nothing of the request commits
            self._end(conn, handle)
            raise
        if response is TOO_LARGE:
            self._end(conn, handle)
            return response_too_large(o)
        if handle.ended or handle.rolled_back or self._status(conn) == _IDLE:
            self._end(conn, handle)
            return transaction_ended()
        if handle.key is None:
            return self._commit(conn, handle, None, response, response.status < 500)
        if not keeps(o, response.status):
            self._end(conn, handle)
            return response
        return self._commit(conn, handle, finish_sql(handle.key, handle.scope, response, o.stored_headers),
                            response, True)

    def _commit(self, conn, handle, finish, response, commit):
        """records the outcome (finish: (sql, params)) and commits -> what to send"""
        if not commit:
            self._end(conn, handle)
            return response
        handle._close()
        conn.info.pop("idempotency", None)
        try:
            if finish is None:
                self._send(conn, "COMMIT")
            else:
                self._send(conn, finish[0] + "; COMMIT", finish[1])
        except Exception as exc:
            self._end(conn)
            answer = failure_answer(exc, own=finish is not None, outcome=True)
            if answer is None:
                raise
            return answer
        self._close(conn)
        return response

