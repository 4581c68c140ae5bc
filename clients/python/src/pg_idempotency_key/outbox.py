"""The extension's transactional outbox on RabbitMQ, with pika (Debian's
python3-pika): a relay that publishes with publisher confirms and marks a
message sent only after its confirm, and a consumer wrapper (the inbox)
that claims each delivery's message ID with idem_once in the handler's
transaction, commits, and only then acks.

The promise is an exactly-once *effect*: a message exists when the
producer's transaction commits, may be published or delivered more than
once (a relay killed between the confirm and its mark, a consumer killed
between its commit and its ack, a broker restart), and its handler's
effect commits once.  Order is not promised.

pool: a psycopg_pool.ConnectionPool (or anything whose connection() is a
context manager giving a psycopg 3 Connection that commits on success and
rolls back on error).  parameters: pika connection parameters, or an
amqp:// URL.  pika's BlockingConnection is not thread-safe: one relay or
consumer per thread; stop() may be called from any thread.
"""
import json
import threading

import pika
import pika.exceptions
import psycopg

from .inbox import TransactionEnded, once

__all__ = ["Relay", "run_relay", "Consumer", "consume", "Message", "TransactionEnded"]

CLAIM = ("SELECT message_id, destination, payload, headers, fence"
         " FROM idem_outbox_claim(%s, %s::interval)")
MARK_SENT = "SELECT idem_outbox_mark_sent(%s::uuid[], %s)"
MARK_FAILED = "SELECT idem_outbox_mark_failed(%s, %s, %s, %s::interval, %s)"

STALE_FENCE = "IK003"


def _parameters(parameters):
    return pika.URLParameters(parameters) if isinstance(parameters, str) else parameters


def _ignore(_err):
    pass


class Relay:
    """Claims batches of the outbox (idem_outbox_claim, each statement a
    transaction of its own), publishes each message on a confirm channel
    with mandatory=True, marks the confirmed ones sent with the claim's
    fence, and marks failed those the broker nacked or returned, or all of
    the rest of the batch when the broker connection is lost.  Killed at
    any point it loses nothing: after its lease another relay publishes the
    messages again (the inbox deduplicates).  Several relays run side by
    side (SKIP LOCKED): they never wait for each other.

    pika waits for each message's confirm before the next publish; a
    confirm that never comes is bounded by the connection's heartbeat (a
    dead broker) and blocked_connection_timeout (a broker in a resource
    alarm), both pika connection parameters: the connection closes, the
    batch's rest is marked failed.
    """

    def __init__(self, pool, parameters, *, exchange="", batch_size=100, lease="1 minute",
                 retry_after="10 seconds", max_attempts=10, idle_delay=0.5, error_delay=1.0,
                 on_error=None):
        if pool is None:
            raise TypeError("Relay: pool is required")
        if parameters is None:
            raise TypeError("Relay: parameters (or an amqp:// URL) is required")
        self.pool = pool
        self.parameters = _parameters(parameters)
        self.exchange = exchange
        self.batch_size = batch_size
        self.lease = lease
        self.retry_after = retry_after
        self.max_attempts = max_attempts
        self.idle_delay = idle_delay
        self.error_delay = error_delay
        self.on_error = on_error or _ignore
        self._connection = None
        self._channel = None
        self._stopping = threading.Event()

    # --- the broker ---------------------------------------------------------

    def _open_channel(self):
        if self._channel is None or not self._channel.is_open or not self._connection.is_open:
            self._close_connection()
            self._connection = pika.BlockingConnection(self.parameters)
            channel = self._connection.channel()
            channel.confirm_delivery()
            self._channel = channel
        return self._channel

    def _close_connection(self):
        connection, self._connection, self._channel = self._connection, None, None
        if connection is not None and connection.is_open:
            try:
                connection.close()
            except Exception as err:
                self.on_error(err)

    def _publish(self, channel, row):
        """None once the broker confirmed the message, else the reason."""
        message_id, destination, payload, headers = row[0], row[1], row[2], row[3]
        properties = pika.BasicProperties(
            message_id=str(message_id), delivery_mode=2, content_type="application/json",
            headers=headers)
        try:
            channel.basic_publish(self.exchange, destination, json.dumps(payload).encode(),
                                  properties=properties, mandatory=True)
        except pika.exceptions.UnroutableError:
            return RuntimeError(f'no queue is bound to "{destination}"')
        except pika.exceptions.NackError:
            return RuntimeError("nacked by the broker")
        return None

    # --- the database -------------------------------------------------------

    def _mark_sent(self, message_ids, fence):
        """All or none is refused (IK003) when another relay took any of the
        messages over after the lease ended: the others are still this
        claim's, marked one by one, so that they are not published again."""
        try:
            self._execute(MARK_SENT, (message_ids, fence))
        except psycopg.Error as err:
            if err.sqlstate != STALE_FENCE or len(message_ids) == 1:
                raise
            for message_id in message_ids:
                try:
                    self._execute(MARK_SENT, ([message_id], fence))
                except psycopg.Error as one_err:
                    if one_err.sqlstate != STALE_FENCE:
                        raise
                    self.on_error(one_err)

    def _mark_failed(self, row, err):
        try:
            self._execute(MARK_FAILED, (row[0], row[4], str(err) or type(err).__name__,
                                        self.retry_after, self.max_attempts))
        except psycopg.Error as mark_err:
            self.on_error(mark_err)   # IK003: taken over; else claimed again after the lease

    def _execute(self, sql, params):
        with self.pool.connection() as conn:
            return conn.execute(sql, params).fetchall()

    # --- the loop -----------------------------------------------------------

    def run_once(self):
        """One claim, publish and mark; returns {claimed, sent, failed}."""
        rows = self._execute(CLAIM, (self.batch_size, self.lease))
        if not rows:
            return {"claimed": 0, "sent": 0, "failed": 0}
        fence = rows[0][4]
        outcomes = []
        try:
            channel = self._open_channel()
            for row in rows:
                outcomes.append(self._publish(channel, row))
        except Exception as err:
            # the connection or channel is gone (or pika could not encode a
            # message): the rest of the batch fails, and the connection is
            # made again (a message whose confirm was lost is published again)
            self._close_connection()
            outcomes.extend([err] * (len(rows) - len(outcomes)))
        sent = [row[0] for row, outcome in zip(rows, outcomes) if outcome is None]
        if sent:
            self._mark_sent(sent, fence)
        failed = [(row, outcome) for row, outcome in zip(rows, outcomes) if outcome is not None]
        for row, outcome in failed:
            self._mark_failed(row, outcome)
        if failed:
            self.on_error(failed[0][1])
        return {"claimed": len(rows), "sent": len(sent), "failed": len(failed)}

    def run(self):
        """Loops until stop(): claims, publishes, marks; pauses idle_delay
        seconds after an empty claim and error_delay after a failure."""
        self._stopping.clear()
        try:
            while not self._stopping.is_set():
                delay = 0
                try:
                    counts = self.run_once()
                    if counts["claimed"] == 0:
                        delay = self.idle_delay
                    elif counts["failed"]:
                        delay = self.error_delay
                except Exception as err:   # the database or the broker: survived, retried
                    self.on_error(err)
                    delay = self.error_delay
                if delay:
                    self._pause(delay)
        finally:
            self._close_connection()

    def _pause(self, delay):
        """Waits delay seconds, servicing the broker connection's heartbeats
        (an idle connection is otherwise closed by the broker)."""
        connection = self._connection
        if connection is not None and connection.is_open:
            try:
                connection.process_data_events(time_limit=delay)
                return
            except Exception as err:    # lost while idle: made again on the next batch
                self.on_error(err)
                self._close_connection()
        self._stopping.wait(delay)

    def stop(self):
        """Ends run() after the batch in hand, or within idle_delay (from any thread)."""
        self._stopping.set()

    def close(self):
        """Closes the broker connection (after run_once without run)."""
        self._close_connection()


def run_relay(pool, parameters, **options):
    """Runs a Relay in this thread until it is stopped; returns the Relay."""
    relay = Relay(pool, parameters, **options)
    relay.run()
    return relay


class Message:
    """A delivery handed to the handler: message_id, payload (the decoded
    JSON body), body (bytes), properties (pika.BasicProperties) and method
    (pika.spec.Basic.Deliver: redelivered, delivery_tag, routing_key)."""
    __slots__ = ("message_id", "payload", "body", "properties", "method")

    def __init__(self, message_id, payload, body, properties, method):
        self.message_id = message_id
        self.payload = payload
        self.body = body
        self.properties = properties
        self.method = method


class Consumer:
    """For each delivery: in one transaction, idem_once(message_id, scope,
    ttl); the first time, handler(conn, message) on that transaction, then
    COMMIT, then ack; a message ID committed before (a redelivery, or a
    message the relay published twice) is acked without running the
    handler.  A handler error or a database failure rolls back and nacks
    with requeue; a delivery without a message ID, or whose body is not
    JSON, is nacked without requeue (to the queue's dead-letter exchange,
    if it has one)."""

    def __init__(self, pool, parameters, queue, handler, *, scope=None, ttl="7 days",
                 prefetch=10, reconnect_delay=1.0, assert_queue=True, on_error=None):
        for name, value in (("pool", pool), ("queue", queue), ("handler", handler)):
            if not value:
                raise TypeError(f"Consumer: {name} is required")
        self.pool = pool
        self.parameters = _parameters(parameters) if parameters is not None else None
        self.queue = queue
        self.handler = handler
        self.scope = scope if scope is not None else f"inbox:{queue}"
        self.ttl = ttl
        self.prefetch = prefetch
        self.reconnect_delay = reconnect_delay
        self.assert_queue = assert_queue
        self.on_error = on_error or _ignore
        self.stats = {"handled": 0, "duplicates": 0, "requeued": 0, "rejected": 0}
        self._stopping = threading.Event()

    def _settle(self, channel, tag, how):
        try:
            if how == "ack":
                channel.basic_ack(tag)
            else:
                channel.basic_nack(tag, requeue=(how == "requeue"))
        except Exception as err:
            # the channel closed: the broker redelivers, the inbox deduplicates
            self.on_error(err)

    def on_message(self, channel, method, properties, body):
        """pika's on_message_callback for channel.basic_consume (auto_ack off)."""
        tag = method.delivery_tag
        message_id = properties.message_id
        try:
            if not isinstance(message_id, str) or message_id == "":
                raise ValueError("a delivery without a message ID cannot be deduplicated")
            payload = json.loads(body)
        except ValueError as err:
            self.stats["rejected"] += 1
            self._settle(channel, tag, "reject")
            self.on_error(err)
            return
        message = Message(message_id, payload, body, properties, method)
        try:
            first, _ = once(self.pool, message_id, self.scope, self.ttl,
                            lambda conn: self.handler(conn, message))
        except Exception as err:      # the handler's or the database's: rolled back
            self.stats["requeued"] += 1
            self._settle(channel, tag, "requeue")
            self.on_error(err)
            return
        self.stats["handled" if first else "duplicates"] += 1
        self._settle(channel, tag, "ack")

    def attach(self, channel):
        """Sets prefetch (and declares the queue) on a channel the application
        manages and consumes from it with on_message."""
        if self.assert_queue:
            channel.queue_declare(self.queue, durable=True)
        channel.basic_qos(prefetch_count=self.prefetch)
        channel.basic_consume(self.queue, self.on_message, auto_ack=False)
        return self

    def run(self):
        """Connects, consumes until stop(), and connects again after the
        broker or the network dropped the connection (reconnect_delay)."""
        if self.parameters is None:
            raise TypeError("Consumer.run: parameters (or an amqp:// URL) is required")
        self._stopping.clear()
        while not self._stopping.is_set():
            connection = None
            try:
                connection = pika.BlockingConnection(self.parameters)
                channel = connection.channel()
                self.attach(channel)
                # pika leaves a connection lost inside a callback closed
                # without raising here: checked on every turn
                while not self._stopping.is_set() and channel.is_open:
                    connection.process_data_events(time_limit=1)
            except Exception as err:    # the broker's or pika's: survived, connected again
                self.on_error(err)
            finally:
                if connection is not None and connection.is_open:
                    try:
                        connection.close()
                    except Exception as err:
                        self.on_error(err)
            if not self._stopping.is_set():
                self._stopping.wait(self.reconnect_delay)

    def stop(self):
        """Ends run() after the delivery in hand (from any thread)."""
        self._stopping.set()


def consume(channel, queue, handler, pool, **options):
    """The wrapper on a channel the application manages: returns a Consumer
    consuming queue on channel (run channel.start_consuming() after it)."""
    return Consumer(pool, None, queue, handler, **options).attach(channel)
