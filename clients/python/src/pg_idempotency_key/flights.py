"""The claims this process is sending or holds in a transaction, per pool
(ASGI), so that a duplicate arriving meanwhile needs no round trip: it is
answered 409 at once (once the key is claimed), or waits for the claim's
end and is answered with the response that committed (what a claim would
then replay), or claims at the server itself if nothing committed.  Only a
duplicate with the same fingerprint input (method, path, body) waits here;
any other goes to the server, which decides (422 for another request)."""
import asyncio

# id(pool) -> {(scope, key): Flight}; an entry lives only while a claim is
# in flight, so a pool's id is never taken for another's (asyncpg's Pool
# cannot be referred to weakly)
_by_pool = {}
TIMED_OUT = object()


class Flight:
    __slots__ = ("pool_id", "flights", "id", "same", "claimed", "landed", "waiters")

    def __init__(self, pool_id, flights, id_, same):
        self.pool_id, self.flights, self.id, self.same = pool_id, flights, id_, same
        self.claimed = False
        self.waiters = 0
        self.landed = None  # the future duplicates wait on, made by the first (seldom any)


def flight_of(pool, scope, key, fingerprint):
    """-> the flight of a claim of this process for the same key, scope and
    fingerprint input, or None"""
    flight = _by_pool.get(id(pool), {}).get((scope, key))
    return flight if flight is not None and flight.same == fingerprint else None


def take_off(pool, scope, key, fingerprint):
    """a claim this process sends: duplicates find it until land(); None if
    another request of this process has the key (it goes to the server)"""
    flights = _by_pool.setdefault(id(pool), {})
    if (scope, key) in flights:
        return None
    flight = flights[(scope, key)] = Flight(id(pool), flights, (scope, key), fingerprint)
    return flight


def land(flight, replay):
    """the claim ended: replay is the Response a claim of the key would now
    replay, or None when nothing was committed; a second call changes nothing"""
    flights = flight.flights
    if flights.get(flight.id) is flight:
        del flights[flight.id]
        if not flights:
            _by_pool.pop(flight.pool_id, None)
    if flight.landed is not None and not flight.landed.done():
        flight.landed.set_result(replay)


async def await_flight(flight, seconds):
    """-> the Response to replay, None (nothing committed), or TIMED_OUT
    when the claim did not end within seconds"""
    if flight.landed is None:  # found in flight (flight_of), so not landed yet
        flight.landed = asyncio.get_running_loop().create_future()
    flight.waiters += 1
    try:
        return await asyncio.wait_for(asyncio.shield(flight.landed), max(0.0, seconds))
    except asyncio.TimeoutError:
        return TIMED_OUT
    finally:
        flight.waiters -= 1


def waiting(pool):
    """-> how many duplicates wait in memory for claims on pool"""
    return sum(flight.waiters for flight in _by_pool.get(id(pool), {}).values())

