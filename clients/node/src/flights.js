// The claims this process is sending or holds in a transaction, per pool,
// so that a duplicate arriving meanwhile needs no round trip: it is
// answered 409 at once (once the key is claimed), or waits for the claim's
// end and is answered with the response that committed (what a claim would
// then replay), or claims at the server itself if nothing committed.  Only
// a duplicate with the same fingerprint input (method, path, body) waits
// here; any other goes to the server, which decides (422 for another
// request).

const byPool = new WeakMap();

function flights(pool) {
  let map = byPool.get(pool);
  if (!map) {
    map = new Map();
    byPool.set(pool, map);
  }
  return map;
}

const idOf = (request) => `${request.scope}\u0000${request.key}`;
const sameOf = (fingerprint) => fingerprint.json ?? fingerprint.hash.toString('hex');

// -> the flight of a claim of this process for the same key, scope and
// fingerprint input, or null
export function flightOf(pool, request, fingerprint) {
  const flight = byPool.get(pool)?.get(idOf(request));
  return flight && flight.same === sameOf(fingerprint) ? flight : null;
}

// a claim this process sends: duplicates find it until land(); null if
// another request of this process has the key (it goes to the server)
export function takeOff(pool, request, fingerprint) {
  const map = flights(pool);
  const id = idOf(request);
  if (map.has(id)) return null;
  const flight = { pool, id, same: sameOf(fingerprint), claimed: false, done: null, landed: null, waiters: 0 };
  flight.landed = new Promise((resolve) => { flight.done = resolve; });
  map.set(id, flight);
  return flight;
}

// the claim ended: replay is the answer of a duplicate (its committed
// response, or the one the server replayed), or null when nothing was
// committed
export function land(flight, replay) {
  const map = flights(flight.pool);
  if (map.get(flight.id) === flight) map.delete(flight.id);
  flight.done(replay);
}

// -> the replay, null (nothing committed), or undefined when the
// claim did not end within ms
export function awaitFlight(flight, ms) {
  let timer;
  const timeout = new Promise((resolve) => { timer = setTimeout(resolve, ms, undefined); });
  flight.waiters += 1;
  return Promise.race([flight.landed, timeout]).finally(() => {
    clearTimeout(timer);
    flight.waiters -= 1;
  });
}

// -> how many duplicates wait in memory for claims on pool
export function waiting(pool) {
  let n = 0;
  for (const flight of byPool.get(pool)?.values() ?? []) n += flight.waiters;
  return n;
}
