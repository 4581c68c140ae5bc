"""The outbox relay and the inbox consumer (pg_idempotency_key.outbox)
against a real RabbitMQ and the extension: what the README's "Messaging"
section promises, each with its fault.  IDEM_TEST_DSN names the database,
IDEM_TEST_AMQP_URL the broker; IDEM_TEST_RABBITMQ_DIR and
IDEM_TEST_RABBITMQ_PORT let the restart test stop and start it
(scripts/rabbitmq.sh).  Every wait polls for a state with a generous bound;
lease ends are simulated by moving available_at.  Skipped without a broker
(the HTTP suite runs this directory too)."""
import json
import os
import signal
import subprocess
import sys
import threading
import time

import pytest

if not os.environ.get("IDEM_TEST_AMQP_URL"):
    pytest.skip("IDEM_TEST_AMQP_URL not set (run_python_outbox_suite in scripts/test.sh)",
                allow_module_level=True)

import pika  # noqa: E402
import psycopg  # noqa: E402
from psycopg.types.json import Jsonb  # noqa: E402
from psycopg_pool import ConnectionPool  # noqa: E402

from pg_idempotency_key.outbox import Consumer, Relay  # noqa: E402

HERE = os.path.dirname(os.path.abspath(__file__))
DSN = os.environ["IDEM_TEST_DSN"]
URL = os.environ["IDEM_TEST_AMQP_URL"]
BOUND = 180   # seconds: the generous bound of every wait


@pytest.fixture(scope="module")
def pool():
    p = ConnectionPool(DSN, min_size=1, max_size=14)
    with p.connection() as conn:
        conn.execute("""CREATE TABLE IF NOT EXISTS outbox_effects (
            queue text NOT NULL, message_id text NOT NULL, redelivered boolean NOT NULL DEFAULT false)""")
        conn.execute("CREATE TABLE IF NOT EXISTS outbox_orders (id int PRIMARY KEY)")
    yield p
    p.close()


class Broker:
    """A connection for declarations and queue counts (made again after a restart)."""

    def __init__(self):
        self.connect()

    def connect(self):
        parameters = pika.URLParameters(URL)
        parameters.heartbeat = 0     # idle between polls: no heartbeats to miss
        self.connection = pika.BlockingConnection(parameters)
        self.channel = self.connection.channel()

    def close(self):
        if self.connection.is_open:
            try:
                self.connection.close()
            except pika.exceptions.AMQPError:
                pass     # the broker stopped first

    def queued(self, queue):
        return self.channel.queue_declare(queue, passive=True).method.message_count


@pytest.fixture(scope="module")
def broker():
    b = Broker()
    yield b
    b.close()


class Harness:
    """Relays and consumers in threads of this process, stopped after each test."""

    def __init__(self, pool, broker, queue):
        self.pool, self.broker, self.queue = pool, broker, queue
        self.errors = []
        self.threads = []

    def _start(self, runner):
        thread = threading.Thread(target=runner.run, daemon=True)
        thread.start()
        self.threads.append((runner, thread))
        return runner

    def relay(self, **options):
        return self._start(Relay(self.pool, URL, idle_delay=0.05, error_delay=0.2,
                                 on_error=self.errors.append, **options))

    def consumer(self, **options):
        def handler(conn, message):
            conn.execute("INSERT INTO outbox_effects (queue, message_id, redelivered) VALUES (%s, %s, %s)",
                         (self.queue, message.message_id, message.method.redelivered))
        options.setdefault("handler", handler)
        return self._start(Consumer(self.pool, URL, self.queue, reconnect_delay=0.2,
                                    on_error=self.errors.append, **options))

    def stop(self):
        for runner, _ in self.threads:
            runner.stop()
        for _, thread in self.threads:
            thread.join(BOUND)
            assert not thread.is_alive(), "a relay or consumer did not stop"

    def until(self, what, check):
        end = time.monotonic() + BOUND
        while True:
            value = check()
            if value:
                return value
            if time.monotonic() > end:
                raise AssertionError(f"gave up waiting for {what}; errors seen: {self.errors!r}")
            time.sleep(0.05)

    def count(self, sql, params=()):
        with self.pool.connection() as conn:
            return conn.execute(sql, params).fetchone()[0]

    def effects(self):
        return self.count("SELECT count(*) FROM outbox_effects WHERE queue = %s", (self.queue,))

    def distinct_effects(self):
        return self.count("SELECT count(DISTINCT message_id) FROM outbox_effects WHERE queue = %s", (self.queue,))

    def unsent(self):
        return self.count("SELECT count(*) FROM idempotency_outbox WHERE status <> 'sent'")

    def is_sent(self, message_id):
        return self.count("SELECT count(*) FROM idempotency_outbox WHERE message_id = %s AND status = 'sent'",
                          (message_id,))

    def queued(self):
        return self.broker.queued(self.queue)

    def enqueue(self, payload, rollback=False):
        with self.pool.connection() as conn:
            with conn.transaction() as tx:
                if "order" in payload:
                    conn.execute("INSERT INTO outbox_orders VALUES (%s)", (payload["order"],))
                message_id = conn.execute("SELECT idem_outbox_enqueue(%s, %s)",
                                          (self.queue, Jsonb(payload))).fetchone()[0]
                if rollback:
                    raise psycopg.Rollback(tx)
        return str(message_id)

    def end_lease(self, message_id):
        with self.pool.connection() as conn:
            conn.execute("UPDATE idempotency_outbox SET available_at = now() - interval '1 second'"
                         " WHERE message_id = %s", (message_id,))


@pytest.fixture
def harness(request, pool, broker):
    """A new queue per test, an empty outbox."""
    queue = f"outbox-py-{request.node.name}-{os.getpid()}"
    broker.channel.queue_delete(queue)
    broker.channel.queue_declare(queue, durable=True)
    with pool.connection() as conn:
        conn.execute("TRUNCATE idempotency_outbox")
    h = Harness(pool, broker, queue)
    yield h
    h.stop()


def child(role, queue, line):
    """outbox_children.py ROLE QUEUE, once it printed LINE."""
    proc = subprocess.Popen([sys.executable, os.path.join(HERE, "outbox_children.py"), role, queue],
                            stdout=subprocess.PIPE, text=True)
    got = []
    reader = threading.Thread(target=lambda: got.append(proc.stdout.readline()), daemon=True)
    reader.start()
    reader.join(BOUND)
    assert got and got[0].strip() == line, f"{role} did not reach {line!r} (got {got!r}, exit {proc.poll()})"
    return proc


def kill(proc):
    proc.send_signal(signal.SIGKILL)
    proc.wait(BOUND)
    proc.stdout.close()


def test_rolled_back_transactions_publish_nothing(harness):
    for i in range(5):
        harness.enqueue({"i": i}, rollback=True)
    marker = harness.enqueue({"marker": True})
    harness.relay()
    harness.until("the committed message sent", lambda: harness.is_sent(marker))
    assert harness.count("SELECT count(*) FROM idempotency_outbox") == 1, "the outbox holds the committed message only"
    assert harness.queued() == 1, "the broker got one message: the committed one"
    method, properties, body = harness.broker.channel.basic_get(harness.queue, auto_ack=True)
    assert properties.message_id == marker, "its message ID is the outbox's"
    assert json.loads(body) == {"marker": True}
    assert properties.delivery_mode == 2 and properties.content_type == "application/json"


def test_relay_killed_between_confirm_and_mark_publishes_again_and_the_effect_happens_once(harness):
    message_id = harness.enqueue({"n": 1})
    kill(child("relay", harness.queue, "confirmed"))
    assert harness.queued() == 1, "the broker confirmed the message once"
    assert harness.count("SELECT count(*) FROM idempotency_outbox WHERE message_id = %s"
                         " AND status = 'pending' AND attempts = 1", (message_id,)) == 1, \
        "not marked: still pending after one claim"
    # the killed relay's lease ends; another relay publishes it again
    harness.end_lease(message_id)
    harness.relay()
    harness.until("the message marked sent", lambda: harness.is_sent(message_id))
    assert harness.queued() == 2, "published twice: once by each relay"
    c = harness.consumer()
    harness.until("both deliveries settled",
                  lambda: c.stats["handled"] + c.stats["duplicates"] == 2 and harness.queued() == 0)
    assert harness.effects() == 1, "one effect"
    assert c.stats == {"handled": 1, "duplicates": 1, "requeued": 0, "rejected": 0}, \
        "the second copy was acked as a duplicate"


def test_consumer_killed_in_its_handler_is_redelivered_and_the_effect_happens_once(harness):
    message_id = harness.enqueue({"n": 1})
    relay = Relay(harness.pool, URL, on_error=harness.errors.append)
    assert relay.run_once() == {"claimed": 1, "sent": 1, "failed": 0}
    relay.close()
    kill(child("consumer", harness.queue, "in handler"))
    c = harness.consumer()
    harness.until("the redelivery handled", lambda: c.stats["handled"] == 1)
    with harness.pool.connection() as conn:
        rows = conn.execute("SELECT message_id, redelivered FROM outbox_effects WHERE queue = %s",
                            (harness.queue,)).fetchall()
    assert rows == [(message_id, True)], "one effect, from the redelivery"
    harness.until("the queue empty (acked)", lambda: harness.queued() == 0)


def test_a_mark_refused_for_one_taken_over_message_still_marks_the_rest_of_the_batch(harness):
    first = harness.enqueue({"n": 1})
    second = harness.enqueue({"n": 2})
    taken_over = []

    class RacingRelay(Relay):
        # between the confirms and the mark, the first message's lease ends
        # and another relay claims it
        def _mark_sent(self, message_ids, fence):
            if not taken_over:
                harness.end_lease(first)
                with harness.pool.connection() as conn:
                    rows = conn.execute("SELECT message_id, fence FROM idem_outbox_claim(10, '1 hour')").fetchall()
                assert [str(r[0]) for r in rows] == [first], "the other relay claims the first message only"
                taken_over.append(rows[0][1])
            return super()._mark_sent(message_ids, fence)

    relay = RacingRelay(harness.pool, URL, lease="1 hour", on_error=harness.errors.append)
    assert relay.run_once() == {"claimed": 2, "sent": 2, "failed": 0}
    relay.close()
    with harness.pool.connection() as conn:
        rows = conn.execute("SELECT message_id::text, status, fence FROM idempotency_outbox ORDER BY created_at").fetchall()
    assert rows[0] == (first, "pending", taken_over[0]), "the message taken over is left to its new owner"
    assert rows[1][:2] == (second, "sent"), "the rest of the batch is marked"
    assert [e.sqlstate for e in harness.errors] == ["IK003"], "the refusal reached on_error"


def test_no_message_id_is_rejected_and_a_handler_error_rolls_back_and_requeues(harness):
    failures = []

    def handler(conn, message):
        conn.execute("INSERT INTO outbox_effects (queue, message_id) VALUES (%s, %s)",
                     (harness.queue, message.message_id))
        if not failures:
            failures.append(message.message_id)
            raise RuntimeError("the handler fails once")

    harness.broker.channel.basic_publish("", harness.queue, b"{}")   # no message_id
    message_id = harness.enqueue({"n": 1})
    harness.relay()
    c = harness.consumer(handler=handler)
    harness.until("the message handled after its requeue", lambda: c.stats["handled"] == 1)
    assert c.stats == {"handled": 1, "duplicates": 0, "requeued": 1, "rejected": 1}
    assert harness.effects() == 1, "the failed attempt's insert rolled back"
    assert failures == [message_id]
    harness.until("the queue empty", lambda: harness.queued() == 0)


@pytest.mark.skipif(not os.environ.get("IDEM_TEST_RABBITMQ_DIR"), reason="IDEM_TEST_RABBITMQ_DIR not set")
def test_broker_restarted_in_the_middle_of_a_stream_loses_nothing_and_doubles_nothing(harness):
    n = 60
    harness.relay(retry_after="1 second", max_attempts=1000)
    harness.consumer()
    for i in range(n // 3):
        harness.enqueue({"i": i})
    harness.until("some messages consumed", lambda: harness.effects() >= 5)
    script = os.path.join(HERE, "..", "..", "..", "scripts", "rabbitmq.sh")
    rabbit = [os.environ["IDEM_TEST_RABBITMQ_DIR"], os.environ["IDEM_TEST_RABBITMQ_PORT"]]
    harness.broker.close()
    subprocess.run(["bash", script, "stop", *rabbit], check=True)
    # producers go on while the broker is down: their messages wait in the outbox
    for i in range(n // 3, 2 * n // 3):
        harness.enqueue({"i": i})
    subprocess.run(["bash", script, "start", *rabbit], check=True)
    harness.broker.connect()
    for i in range(2 * n // 3, n):
        harness.enqueue({"i": i})
    harness.until(f"{n} effects", lambda: harness.effects() >= n and harness.unsent() == 0)
    harness.until("the queue empty (acked)", lambda: harness.queued() == 0)
    assert harness.effects() == n, "every message has its effect, once"
    assert harness.distinct_effects() == n
    assert harness.errors, "the relay and the consumer met the restart"


def test_storm_two_relays_two_consumers_n_committed_transactions_give_n_effects(harness):
    with harness.pool.connection() as conn:
        conn.execute("TRUNCATE outbox_orders")
    harness.relay(batch_size=7)
    harness.relay(batch_size=7)
    consumers = [harness.consumer(prefetch=5), harness.consumer(prefetch=5)]
    total = 200
    orders = iter(range(total))
    lock = threading.Lock()
    committed = []

    def producer():
        while True:
            with lock:
                order = next(orders, None)
            if order is None:
                return
            rollback = order % 4 == 3
            message_id = harness.enqueue({"order": order}, rollback=rollback)
            if not rollback:
                with lock:
                    committed.append(message_id)

    producers = [threading.Thread(target=producer) for _ in range(8)]
    for t in producers:
        t.start()
    for t in producers:
        t.join(BOUND)
    assert harness.count("SELECT count(*) FROM outbox_orders") == len(committed) == 150, \
        "the committed producer transactions"
    harness.until(f"{len(committed)} effects", lambda: harness.effects() >= len(committed)
                  and harness.unsent() == 0 and harness.queued() == 0)
    assert harness.effects() == len(committed), "N committed transactions, N effects"
    with harness.pool.connection() as conn:
        rows = conn.execute("SELECT message_id FROM outbox_effects WHERE queue = %s", (harness.queue,)).fetchall()
    assert sorted(r[0] for r in rows) == sorted(committed), "each committed message once, no rolled-back one"
    assert all(c.stats["handled"] > 0 for c in consumers), "both consumers worked"


def celery_worker(queue, log, hang, barrier):
    """A real Celery worker (celery_outbox_app.py) on queue, its prefork
    pool of one process running the tasks; its barrier task writes to the
    file barrier."""
    env = dict(os.environ, IDEM_TEST_CELERY_QUEUE=queue, IDEM_TEST_CELERY_HANG=hang,
               IDEM_TEST_CELERY_BARRIER=barrier)
    return subprocess.Popen([sys.executable, "-m", "celery", "-A", "celery_outbox_app", "worker",
                             "--pool=prefork", "--concurrency=1", "-Q", queue, "--without-heartbeat",
                             "--without-mingle", "--without-gossip", "-l", "warning"],
                            cwd=HERE, env=env, stdout=log, stderr=subprocess.STDOUT)


def test_celery_worker_killed_in_the_task_and_the_task_published_twice_give_one_effect(harness, tmp_path):
    pytest.importorskip("celery")
    from pg_idempotency_key.celery_task import enqueue_task
    with harness.pool.connection() as conn:
        message_id = enqueue_task(conn, "record_effect", [7], queue=harness.queue)
    # published by a relay killed between the confirm and its mark
    kill(child("relay", harness.queue, "confirmed"))
    hang = tmp_path / "in-task"
    log = open(tmp_path / "worker.log", "w")
    def log_text():
        return (tmp_path / "worker.log").read_text()
    barrier = tmp_path / "barrier"
    worker = celery_worker(harness.queue, log, str(hang), str(barrier))
    try:
        # the pool's process is killed in the task, before its commit; the
        # worker requeues its message (reject_on_worker_lost) and runs it again
        harness.until("the task running", lambda: hang.exists() or worker.poll() is not None)
        assert worker.poll() is None, f"the worker exited before the task:\n{log_text()}"
        os.kill(int(hang.read_text()), signal.SIGKILL)
        harness.until("the redelivered task's effect", lambda: harness.effects() == 1)
        # the killed relay's lease ends; another relay publishes it again
        harness.end_lease(message_id)
        relay = Relay(harness.pool, URL, on_error=harness.errors.append)
        assert relay.run_once() == {"claimed": 1, "sent": 1, "failed": 0}
        # then a barrier: the worker holds one unacknowledged message at a
        # time, so the barrier runs only once the second copy was acked
        # (taken from the queue is not enough: a copy held but not started
        # goes back at the worker's shutdown)
        with harness.pool.connection() as conn:
            barrier_id = enqueue_task(conn, "barrier", queue=harness.queue)
        assert relay.run_once() == {"claimed": 1, "sent": 1, "failed": 0}
        relay.close()
        harness.until("the barrier run", lambda: barrier.exists() and barrier.read_text().split() == [barrier_id])
    finally:
        worker.send_signal(signal.SIGTERM)     # warm shutdown: the task in hand finishes
        worker.wait(BOUND)
        log.close()
    left = set()  # back in the queue: nothing but the barrier (its own ack may not have reached the broker)
    while True:
        method, properties, _ = harness.broker.channel.basic_get(harness.queue, auto_ack=True)
        if method is None:
            break
        left.add(properties.message_id)
    assert left <= {barrier_id}, f"the second copy acked, not back in the queue; worker log:\n{log_text()}"
    with harness.pool.connection() as conn:
        rows = conn.execute("SELECT message_id FROM outbox_effects WHERE queue = %s", (harness.queue,)).fetchall()
    assert rows == [(message_id,)], f"one effect for a killed worker and two copies; worker log:\n{log_text()}"
