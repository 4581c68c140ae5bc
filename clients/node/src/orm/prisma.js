// Prisma (driver adapter @prisma/adapter-pg): the handler's interactive
// transaction runs in the claim's transaction.
//
//   const prisma = new PrismaClient({ adapter: idempotentAdapter(new PrismaPg(pool)) });
//   const order = await prismaTransaction(prisma, req.idempotency, (tx) => tx.order.create(...));
//
// prismaTransaction is prisma.$transaction(fn, options) with the request
// bound (AsyncLocalStorage) for its duration: the adapter's
// startTransaction then opens Prisma's transaction on the claim's client
// (claim-pool.js: Prisma's BEGIN and COMMIT are not sent, the package
// commits with the stored response; its ROLLBACK dooms the request). While
// bound, a statement of the PrismaClient itself (prisma.order.create
// inside the callback instead of tx.order.create) would run on another
// connection and commit on its own: it is refused.
import { AsyncLocalStorage } from 'node:async_hooks';
import { transactionPool } from './claim-pool.js';

const bound = new AsyncLocalStorage();

export class OutsideTransaction extends Error {
  constructor() {
    super('idempotency: a statement of the PrismaClient itself inside prismaTransaction() runs on another'
      + ' connection and would commit on its own: write with the transaction client (tx) the callback receives');
    this.name = 'OutsideTransaction';
  }
}

function refuseUnbound() {
  if (bound.getStore()) throw new OutsideTransaction();
}

// The transaction of the adapter opened on the claim's client: the
// adapter's own startTransaction (its type mapping and error conversion)
// run over a pool that holds only that client.
function claimTransaction(adapter, client, isolationLevel) {
  const over = Object.create(adapter, { client: { value: transactionPool(client) } });
  return Object.getPrototypeOf(adapter).startTransaction.call(over, isolationLevel);
}

// -> the adapter (as Prisma calls it) with startTransaction bound to the
// request's claim inside prismaTransaction()
function bindAdapter(adapter) {
  return new Proxy(adapter, {
    get(target, prop) {
      if (prop === 'startTransaction') {
        return (isolationLevel) => {
          const store = bound.getStore();
          if (!store) return target.startTransaction(isolationLevel);
          if (store.opened) throw new OutsideTransaction();
          store.opened = true;
          return claimTransaction(target, store.client, isolationLevel);
        };
      }
      if (prop === 'queryRaw' || prop === 'executeRaw' || prop === 'executeScript') {
        return (...args) => {
          refuseUnbound();
          return target[prop](...args);
        };
      }
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

// idempotentAdapter(factory): the adapter factory (new PrismaPg(pool))
// for new PrismaClient({ adapter }), unchanged outside prismaTransaction()
export function idempotentAdapter(factory) {
  return new Proxy(factory, {
    get(target, prop) {
      if (prop === 'connect') return async () => bindAdapter(await target.connect());
      const value = Reflect.get(target, prop, target);
      return typeof value === 'function' ? value.bind(target) : value;
    },
  });
}

// prismaTransaction(prisma, idempotency, fn, options?) -> fn's result:
// prisma.$transaction(fn, options) in the claim's transaction
// (req.idempotency, or a request without a key on a route where it is
// optional: a transaction of its own, committed with a success)
export async function prismaTransaction(prisma, idempotency, fn, options) {
  const client = await idempotency.begin();
  return bound.run({ client, opened: false }, () => prisma.$transaction(fn, options));
}
