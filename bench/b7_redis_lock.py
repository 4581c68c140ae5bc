#!/usr/bin/python3
"""B7 of make bench: the pattern the extension replaces, end to end, against
the extension's single transaction, from one client program with real
drivers (psycopg 3 and redis-py, Debian's python3-psycopg and python3-redis).

Redis pattern, per request: GET the stored result (a replay when there is
one); SET lock NX EX (another holder: answer 409 and let the client retry);
the business transaction in PostgreSQL; SET the result (EX one day) and DEL
the lock.  Extension, per request: one statement in autocommit,
SELECT bench_place_order(key, scope, body), the README's pattern (claim,
business insert and idem_finish in one transaction; replay, or 409 for a key
in progress).  The same requests on both sides.

  b7_redis_lock.py throughput MODE PG_DSN REDIS_SOCKET CLIENTS SECONDS RUN
      requests/s of MODE (redis | ext) with CLIENTS processes, each sending
      requests with new keys for SECONDS; prints "rps N".
  b7_redis_lock.py duplicates MODE PG_DSN REDIS_SOCKET CLIENTS KEYS ROUNDS LOCK_SECONDS RUN
      CLIENTS processes send requests for the KEYS hot keys of each round,
      each request retried while busy (409); just before every round a
      client sends the first request of one of its keys and is killed
      (SIGKILL) right after its PostgreSQL COMMIT, before it could tell
      Redis; a round lasts LOCK_SECONDS + 1 s, so that a lock it left
      expires within it.  Prints "effects N keys N duplicates N killed N"
      from bench_order.
"""
import os
import signal
import sys
import time
import traceback
import uuid

import psycopg
import redis

RESULT_TTL = 86400


def body_of(key):
    return '{"sku": %d, "qty": 1}' % (uuid.UUID(key).int % 1000)


def redis_request(pg, r, run, scope, key, body, lock_seconds, die_after_commit=False):
    """The seed's pattern; returns 'replay', 'done' or 'busy'."""
    rkey = 'idem:%s:%s' % (scope, key)
    if r.get(rkey + ':result') is not None:
        return 'replay'
    token = uuid.uuid4().hex
    if not r.set(rkey + ':lock', token, nx=True, px=int(lock_seconds * 1000)):
        return 'busy'
    # checked again under the lock: a holder may have finished in between
    if r.get(rkey + ':result') is not None:
        r.delete(rkey + ':lock')
        return 'replay'
    with pg.transaction():
        cur = pg.execute("INSERT INTO bench_order (run, key, sku) VALUES (%s, %s, (%s::jsonb ->> 'sku')::int)"
                         " RETURNING id", (run, key, body))
        order_id = cur.fetchone()[0]
    if die_after_commit:
        os.kill(os.getpid(), signal.SIGKILL)
    r.set(rkey + ':result', '{"order_id": %d}' % order_id, ex=RESULT_TTL)
    # release only our own lock (compare and delete)
    r.eval("if redis.call('get', KEYS[1]) == ARGV[1] then return redis.call('del', KEYS[1]) end return 0",
           1, rkey + ':lock', token)
    return 'done'


def ext_request(pg, run, scope, key, body, die_after_commit=False):
    """The extension's single transaction; returns 'replay', 'done' or 'busy'."""
    answer = pg.execute("SELECT bench_place_order(%s, %s, %s, %s::jsonb)",
                        (run, scope, key, body)).fetchone()[0]
    if die_after_commit and answer == 'done':
        os.kill(os.getpid(), signal.SIGKILL)
    return answer


def connect(dsn):
    return psycopg.connect(dsn, autocommit=True, prepare_threshold=0)


def throughput_worker(mode, dsn, sock, seconds, run, client, wfd):
    pg = connect(dsn)
    r = redis.Redis(unix_socket_path=sock)
    n = 0
    scope = 'acct_%d' % client
    end = time.monotonic() + seconds
    while time.monotonic() < end:
        key = str(uuid.uuid5(uuid.NAMESPACE_URL, '%s-%d-%d' % (run, client, n)))
        body = body_of(key)
        if mode == 'redis':
            a = redis_request(pg, r, run, scope, key, body, 30)
        else:
            a = ext_request(pg, run, scope, key, body)
        if a != 'done':
            raise SystemExit('unexpected answer %s for a new key' % a)
        n += 1
    os.write(wfd, b'%d\n' % n)
    os._exit(0)


def throughput(mode, dsn, sock, clients, seconds, run):
    rfd, wfd = os.pipe()
    pids = []
    for c in range(clients):
        pid = os.fork()
        if pid == 0:
            os.close(rfd)
            try:
                throughput_worker(mode, dsn, sock, seconds, run, c, wfd)
            finally:
                os._exit(1)
        pids.append(pid)
    os.close(wfd)
    t0 = time.monotonic()
    failed = 0
    for pid in pids:
        failed += os.waitpid(pid, 0)[1] != 0
    elapsed = time.monotonic() - t0
    data = os.read(rfd, 1 << 16).split()
    if failed:
        raise SystemExit('%d client(s) failed' % failed)
    print('rps %.0f' % (sum(int(x) for x in data) / elapsed))


def hot_key(run, rnd, i):
    return str(uuid.uuid5(uuid.NAMESPACE_URL, '%s-hot-%d-%d' % (run, rnd, i)))


def hot_worker(mode, dsn, sock, keys, rounds, lock_seconds, run, client, start):
    """Every round: each of the round's keys in turn (from a different one
    for each client), each retried while busy, as a client whose request
    got 409 retries it."""
    pg = connect(dsn)
    r = redis.Redis(unix_socket_path=sock)
    round_len = lock_seconds + 1.0
    for rnd in range(rounds):
        round_start = start + rnd * round_len
        time.sleep(max(0.0, round_start - time.time()))
        for j in range(keys):
            key = hot_key(run, rnd, (client + j) % keys)
            while time.time() < round_start + round_len:
                if mode == 'redis':
                    a = redis_request(pg, r, run, 'hot', key, body_of(key), lock_seconds)
                else:
                    a = ext_request(pg, run, 'hot', key, body_of(key))
                if a != 'busy':
                    break
                time.sleep(0.05)
    os._exit(0)


def victim(mode, dsn, sock, lock_seconds, run, key):
    """A client that sends the first request of a key and is killed right
    after its PostgreSQL COMMIT, before it could tell Redis."""
    pg = connect(dsn)
    r = redis.Redis(unix_socket_path=sock)
    if mode == 'redis':
        redis_request(pg, r, run, 'hot', key, body_of(key), lock_seconds, True)
    else:
        ext_request(pg, run, 'hot', key, body_of(key), True)
    os._exit(3)            # not killed: it did not write


def fork_call(fn, *args):
    pid = os.fork()
    if pid == 0:
        try:
            fn(*args)
        except BaseException:
            traceback.print_exc()
        os._exit(1)
    return pid


def duplicates(mode, dsn, sock, clients, keys, rounds, lock_seconds, run):
    round_len = lock_seconds + 1.0
    start = time.time() + 1.0
    workers = [fork_call(hot_worker, mode, dsn, sock, keys, rounds, lock_seconds, run, c, start)
               for c in range(clients)]
    killed = 0
    for rnd in range(rounds):
        # just before the round: the victim takes one of its keys first
        time.sleep(max(0.0, start + rnd * round_len - 0.2 - time.time()))
        pid = fork_call(victim, mode, dsn, sock, lock_seconds, run, hot_key(run, rnd, rnd % keys))
        status = os.waitpid(pid, 0)[1]
        killed += os.WIFSIGNALED(status) and os.WTERMSIG(status) == signal.SIGKILL
    failed = sum(os.waitpid(pid, 0)[1] != 0 for pid in workers)
    if failed:
        raise SystemExit('%d client(s) failed' % failed)
    with connect(dsn) as pg:
        effects, distinct = pg.execute("SELECT count(*), count(DISTINCT key) FROM bench_order WHERE run = %s",
                                       (run,)).fetchone()
    print('effects %d keys %d duplicates %d killed %d' % (effects, distinct, effects - distinct, killed))


def main(argv):
    if len(argv) >= 8 and argv[1] == 'throughput':
        throughput(argv[2], argv[3], argv[4], int(argv[5]), float(argv[6]), argv[7])
    elif len(argv) >= 10 and argv[1] == 'duplicates':
        duplicates(argv[2], argv[3], argv[4], int(argv[5]), int(argv[6]), int(argv[7]),
                   float(argv[8]), argv[9])
    else:
        sys.exit(__doc__)


if __name__ == '__main__':
    main(sys.argv)
