"""Celery (Debian's python3-celery, RabbitMQ as the broker) on the inbox:
a task decorator whose body runs in the transaction that claims the
task's business key with idem_once, and the outbox's producer side for
Celery: enqueue_task puts a message in Celery's message protocol (version
2) into the outbox in the producer's transaction, which the outbox relay
(pg_idempotency_key.outbox.Relay) publishes.

The business key must be fixed by the producer before the first send: the
key function's result (an order ID, or the outbox's message ID, which
enqueue_task also makes the Celery task id).  A Celery task id that
apply_async drew on its own is no business key: a producer that sends
again after a lost answer or a crash draws another one.
"""
import functools
import uuid

from celery.exceptions import Reject
from psycopg.types.json import Jsonb

from .inbox import once

__all__ = ["idempotent_task", "enqueue_task", "task_id_key"]

ENQUEUE = "SELECT idem_outbox_enqueue(%s, %s, %s, %s::uuid, scope => %s)"


def task_id_key(request, args, kwargs):
    """The key of tasks sent with enqueue_task (or apply_async(task_id=...)
    with an ID the producer fixed): the Celery task id."""
    return request.id


def idempotent_task(app, pool, *, key, scope=None, ttl="7 days", **options):
    """@idempotent_task(app, pool, key=...) over def task(conn, *args, **kwargs).

    key(request, args, kwargs) -> str: the business key.  For each
    delivery, in one transaction: idem_once(key, scope, ttl); the first
    time the task runs with conn on that transaction (never commit or roll
    back on it), then COMMIT, then Celery acks (acks_late); a key committed
    before returns None without running the task, and Celery acks.  A
    worker killed in the task committed nothing: the broker redelivers
    (reject_on_worker_lost for a lost pool child).  A task that raises
    rolls back; Celery's retry policy applies (autoretry_for, self.retry:
    a retry carries the same arguments, so the same key), and a task that
    finally fails is rejected without requeue (acks_on_failure_or_timeout
    off: to the queue's dead-letter exchange, if any), not acked.  No key
    (None or ''): rejected without requeue.  Other options go to app.task.
    """
    if key is None:
        raise TypeError("idempotent_task: key is required (the Celery task id is no business key)")

    def decorate(fn):
        name = options.get("name") or f"{fn.__module__}.{fn.__name__}"
        inbox = scope if scope is not None else f"inbox:celery:{name}"

        @functools.wraps(fn)
        def run(self, *args, **kwargs):
            message_id = key(self.request, args, kwargs)
            if not isinstance(message_id, str) or message_id == "":
                raise Reject("a task without a business key cannot be deduplicated", requeue=False)
            _, result = once(pool, message_id, inbox, ttl, lambda conn: fn(conn, *args, **kwargs))
            return result

        task_options = dict(options, name=name, bind=True, acks_late=True,
                            reject_on_worker_lost=True, acks_on_failure_or_timeout=False)
        return app.task(**task_options)(run)

    return decorate


def enqueue_task(conn, task_name, args=(), kwargs=None, *, queue="celery", message_id=None, scope=""):
    """In the producer's transaction on conn: the Celery task message for
    task_name(*args, **kwargs) into the outbox for queue (published by the
    relay to the default exchange, routing key queue).  Its message ID,
    given or new, is also the Celery task id; returns it."""
    message_id = str(message_id or uuid.uuid4())
    kwargs = kwargs or {}
    headers = {
        "lang": "py", "task": task_name, "id": message_id, "root_id": message_id,
        "parent_id": None, "group": None, "retries": 0, "eta": None, "expires": None,
        "timelimit": [None, None], "argsrepr": repr(tuple(args)), "kwargsrepr": repr(kwargs),
        "origin": "pg-idempotency-key outbox",
    }
    body = [list(args), kwargs, {"callbacks": None, "errbacks": None, "chain": None, "chord": None}]
    conn.execute(ENQUEUE, (queue, Jsonb(body), Jsonb(headers), message_id, scope))
    return message_id
