"""A relay or a consumer in a process of its own, for test_outbox.py to
kill with SIGKILL at a chosen point (python3 outbox_children.py
relay|consumer QUEUE).  It prints one line at that point and then hangs:
  relay: "confirmed" after the broker confirmed the batch, before the mark
  consumer: "in handler" after the handler's insert, before its commit
"""
import os
import sys
import threading

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "src"))

from psycopg_pool import ConnectionPool  # noqa: E402

from pg_idempotency_key.outbox import Consumer, Relay  # noqa: E402


def hang():
    threading.Event().wait()


def main(role, queue):
    pool = ConnectionPool(os.environ["IDEM_TEST_DSN"], min_size=1, max_size=2)
    url = os.environ["IDEM_TEST_AMQP_URL"]
    if role == "relay":
        class StallingRelay(Relay):
            # the mark never reaches the database
            def _mark_sent(self, message_ids, fence):
                print("confirmed", flush=True)
                hang()
        StallingRelay(pool, url, lease="1 hour").run_once()
    elif role == "consumer":
        def handler(conn, message):
            conn.execute("INSERT INTO outbox_effects (queue, message_id) VALUES (%s, %s)",
                         (queue, message.message_id))
            print("in handler", flush=True)
            hang()
        Consumer(pool, url, queue, handler).run()
    else:
        raise SystemExit(f"unknown role {role}")


if __name__ == "__main__":
    main(*sys.argv[1:])
