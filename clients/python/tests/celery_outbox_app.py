"""The Celery app of test_outbox.py's Celery tests, run by a real worker
(python3 -m celery -A celery_outbox_app worker) on the queue
IDEM_TEST_CELERY_QUEUE.  With IDEM_TEST_CELERY_HANG=FILE, the first run of
the task writes its process's pid to FILE after its insert and hangs
before its commit, for the test to kill that process there.  The task
"barrier" only writes its id to IDEM_TEST_CELERY_BARRIER: one message is
delivered at a time (prefetch 1, acks_late), so once it ran, every message
before it was acknowledged."""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from celery import Celery  # noqa: E402
from celery.signals import worker_process_init  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from pg_idempotency_key.celery_task import idempotent_task, task_id_key  # noqa: E402

QUEUE = os.environ["IDEM_TEST_CELERY_QUEUE"]
app = Celery("celery_outbox_app", broker=os.environ["IDEM_TEST_AMQP_URL"])
app.conf.update(task_default_queue=QUEUE, worker_prefetch_multiplier=1, broker_connection_retry_on_startup=True)
# opened in each pool process, after the fork: a connection the parent
# shares outlives a killed child, and its open claim blocks the redelivery
pool = ConnectionPool(os.environ["IDEM_TEST_DSN"], min_size=1, max_size=2, open=False)


@worker_process_init.connect
def _open_pool(**_):
    pool.open()


@app.task(name="barrier", bind=True, acks_late=True)
def barrier(self):
    with open(os.environ["IDEM_TEST_CELERY_BARRIER"], "a") as f:
        f.write(f"{self.request.id}\n")


@idempotent_task(app, pool, key=task_id_key, name="record_effect")
def record_effect(conn, n):
    conn.execute("INSERT INTO outbox_effects (queue, message_id) VALUES (%s, %s)",
                 (QUEUE, record_effect.request.id))
    hang = os.environ.get("IDEM_TEST_CELERY_HANG")
    if hang and not os.path.exists(hang):
        # once: the pool's process that runs it writes its pid and hangs
        with open(hang + ".part", "w") as f:
            f.write(f"{os.getpid()}\n")
        os.rename(hang + ".part", hang)
        threading.Event().wait()
    return n
