// The options of the middleware and the plugin: defaults, checks made
// once at setup (a missing scope, Set-Cookie among the stored headers),
// and per-route overrides.

const MiB = 1024 * 1024;

// response headers stored and replayed unless storedHeaders says otherwise
export const DEFAULT_STORED_HEADERS = Object.freeze(['content-type', 'content-language', 'content-location',
  'location', 'etag', 'last-modified', 'link', 'cache-control', 'vary']);
// never stored: a replay would hand one caller's cookies to another
const NEVER_STORED = new Set(['set-cookie', 'set-cookie2']);
// the largest response a record can hold: the stored body is one jsonb
// string (at most 2^28 - 1 bytes), bytes that are not UTF-8 as base64
// (4/3 larger), with room for the status and headers
export const MAX_RESPONSE_BYTES = 200 * 1000 * 1000;

const DEFAULTS = {
  required: true,
  methods: ['POST', 'PATCH'],
  storedHeaders: DEFAULT_STORED_HEADERS,
  storeClientErrors: true,
  ttl: null,
  lease: null,
  heartbeat: null,
  handlerTimeout: 5 * 60 * 1000,
  waitFor: 0,
  pollFrom: 25,
  retries: 3,
  maxKeyLength: 255,
  maxBodyBytes: 10 * MiB,
  maxResponseBytes: 10 * MiB,
  prepare: false,
};

export function resolveOptions(options) {
  const o = { ...DEFAULTS, ...options };
  if (!o.pool || typeof o.pool.connect !== 'function') {
    throw new TypeError('idempotency: the "pool" option must be a pg.Pool');
  }
  const { scope } = o;
  if (typeof scope === 'function') {
    o.scopeOf = scope;
  } else if (typeof scope === 'string' && scope.length > 0) {
    o.scopeOf = () => scope;
  } else {
    throw new TypeError('idempotency: the "scope" option is required: a function of the request returning the'
      + ' authenticated principal your application established (never a header the caller chooses), or a'
      + ' non-empty string for one scope shared by every caller');
  }
  if (!(o.maxResponseBytes >= 0 && o.maxResponseBytes <= MAX_RESPONSE_BYTES)) {
    throw new TypeError(`idempotency: "maxResponseBytes" is at most ${MAX_RESPONSE_BYTES} (the most a record's stored`
      + ` form holds); ${o.maxResponseBytes} was given`);
  }
  o.methods = o.methods.map((m) => m.toUpperCase());
  o.storedHeaders = o.storedHeaders.map((h) => h.toLowerCase());
  const cookie = o.storedHeaders.find((h) => NEVER_STORED.has(h));
  if (cookie) {
    throw new TypeError(`idempotency: "${cookie}" cannot be a stored header: a replay would give one caller's`
      + ' cookies to whoever sends the key');
  }
  if (o.lease != null && o.heartbeat == null) o.heartbeat = Math.floor(o.lease / 3);
  return o;
}

// Merges per-route settings into resolved ones (the pool and defaults stay).
export function routeOptions(resolved, overrides) {
  if (!overrides || overrides === true) return resolved;
  return resolveOptions({ ...resolved, ...overrides, scope: overrides.scope ?? resolved.scopeOf });
}
