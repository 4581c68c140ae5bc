// One ORM object per request and ORM instance: a handler and the services
// it calls that ask again get the same transaction, not a second one.
const made = new WeakMap(); // req.idempotency -> Map(instance -> Promise)

// -> open(client) once for (idempotency, instance), with client the
// request's client in the transaction its outcome commits with
export function perRequest(idempotency, instance, open) {
  if (!idempotency || typeof idempotency.begin !== 'function') {
    throw new TypeError('idempotency: pass req.idempotency (Express) or request.idempotency (Fastify) of a route the'
      + ' middleware handles');
  }
  let byInstance = made.get(idempotency);
  if (!byInstance) {
    byInstance = new Map();
    made.set(idempotency, byInstance);
  }
  let promise = byInstance.get(instance);
  if (!promise) {
    promise = idempotency.begin().then(open);
    byInstance.set(instance, promise);
  }
  return promise;
}
