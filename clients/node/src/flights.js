// The claims this process holds in a transaction, per pool, so that a
// duplicate arriving meanwhile needs no round trip: it is answered 409 at
// once, or waits for the claim's end and is answered with the response
// that committed (what a claim would then replay), or claims at the server
// if nothing committed.  Only a duplicate with the same fingerprint input
// (method, path, body) waits here; any other goes to the server, which
// decides (422 for another request).

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
const sameOf = (fingerprint) => fingerprint.json ?? fingerprint.hash;

// -> the flight of a claim of this process for the same key, scope and
// fingerprint input, or null
export function flightOf(pool, request, fingerprint) {
  const flight = byPool.get(pool)?.get(idOf(request));
  return flight && flight.same === sameOf(fingerprint) ? flight : null;
}

// a claim of this process: duplicates find it until land()
export function takeOff(pool, request, fingerprint) {
  const flight = { pool, id: idOf(request), same: sameOf(fingerprint), done: null, landed: null };
  flight.landed = new Promise((resolve) => { flight.done = resolve; });
  flights(pool).set(flight.id, flight);
  return flight;
}

// the claim ended: stored is the stored form of its committed response, or
// null when nothing was committed
export function land(flight, stored) {
  const map = flights(flight.pool);
  if (map.get(flight.id) === flight) map.delete(flight.id);
  flight.done(stored);
}

// -> the stored response, null (nothing committed), or undefined when the
// claim did not end within ms
export function awaitFlight(flight, ms) {
  let timer;
  const timeout = new Promise((resolve) => { timer = setTimeout(resolve, ms, undefined); });
  return Promise.race([flight.landed, timeout]).finally(() => clearTimeout(timer));
}
