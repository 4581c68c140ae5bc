// The ORM test application (Express 5): POST /prisma/orders and
// /typeorm/orders place one order row through the ORM in the claim's
// transaction, /raw/orders the same row through req.idempotency.client
// (the baseline of the round-trip count). The query string chooses a
// case: ?fail throws after the write, ?global writes through the ORM's
// own client outside the bound transaction first and then throws,
// ?outside (Prisma) writes through the PrismaClient inside the callback,
// ?commit (TypeORM) commits the runner's transaction itself, ?nested
// (TypeORM) adds a row in manager.transaction that throws (its savepoint
// rolled back). A body with "gate": true waits, after the ORM's work and
// before the answer, for the advisory lock the test holds. The Prisma client is generated first
// (generate.js).
import { createRequire } from 'node:module';
import { PrismaPg } from '@prisma/adapter-pg';
import express from 'express';
import pg from 'pg';
import { DataSource, EntitySchema } from 'typeorm';
import { expressIdempotency } from '../../src/express.js';
import { idempotentAdapter, prismaTransaction } from '../../src/orm/prisma.js';
import { typeormManager } from '../../src/orm/typeorm.js';
import { GATE } from '../app.js';

const { PrismaClient } = createRequire(import.meta.url)('./generated/prisma/index.js');

const Order = new EntitySchema({
  name: 'Order',
  tableName: 'orders',
  columns: {
    id: { type: 'bigint', primary: true, generated: true },
    idempotencyKey: { name: 'idempotency_key', type: 'text', nullable: true },
    tenant: { type: 'text', nullable: true },
    sku: { type: 'text', nullable: true },
  },
});

const tenantOf = (req) => req.headers['x-tenant'] ?? 'default';
// Prisma's interactive transaction times out after 5 s by default: more
// on a loaded machine (the tests' requests queue on a pool of 10)
const LONG = { maxWait: 600000, timeout: 600000 };

const writers = {
  async prisma({ prisma }, req) {
    const { key } = req.idempotency;
    const row = { idempotencyKey: key, tenant: tenantOf(req), sku: req.body.sku ?? null };
    if (req.query.global) {
      await prisma.order.create({ data: { ...row, sku: 'global' } });
      throw new Error('handler failed after a write outside the bound transaction');
    }
    return prismaTransaction(prisma, req.idempotency, async (tx) => {
      const order = await tx.order.create({ data: row });
      if (req.query.outside) await prisma.order.create({ data: { ...row, sku: 'outside' } });
      if (req.query.fail) throw new Error('handler failed after its write');
      return Number(order.id);
    }, LONG);
  },
  async typeorm({ dataSource }, req) {
    const { key } = req.idempotency;
    const row = { idempotencyKey: key, tenant: tenantOf(req), sku: req.body.sku ?? null };
    if (req.query.global) {
      await dataSource.manager.insert(Order, { ...row, sku: 'global' });
      throw new Error('handler failed after a write outside the bound transaction');
    }
    const manager = await typeormManager(dataSource, req.idempotency);
    const { identifiers } = await manager.insert(Order, row);
    if (req.query.nested) {
      await manager.transaction(async (inner) => {
        await inner.insert(Order, { ...row, sku: 'nested' });
        throw new Error('rolled back to its savepoint');
      }).catch(() => {});
    }
    if (req.query.commit) await manager.queryRunner.commitTransaction().catch(() => {});
    if (req.query.fail) throw new Error('handler failed after its write');
    return Number(identifiers[0].id);
  },
  async raw(orms, req) {
    const { rows } = await req.idempotency.client.query(
      'INSERT INTO orders (idempotency_key, tenant, sku) VALUES ($1, $2, $3) RETURNING id',
      [req.idempotency.key, tenantOf(req), req.body.sku ?? null],
    );
    return Number(rows[0].id);
  },
};

// -> {url, close()} of the app on a free loopback port, over dsn
export async function listenOrm(dsn) {
  const pool = new pg.Pool({ connectionString: dsn, max: 10 });
  const prisma = new PrismaClient({ adapter: idempotentAdapter(new PrismaPg(pool)) });
  const dataSource = new DataSource({ type: 'postgres', url: dsn, entities: [Order], extra: { max: 10 } });
  await dataSource.initialize();
  const orms = { prisma, dataSource };
  const app = express();
  app.use(express.json());
  for (const name of Object.keys(writers)) {
    // TypeORM's requests are claimed on the DataSource's own pg.Pool
    const own = name === 'typeorm' ? dataSource.driver.master : pool;
    const idempotent = expressIdempotency({ pool: own, scope: tenantOf, waitFor: 120000 });
    app.post(`/${name}/orders`, idempotent, async (req, res) => {
      const id = await writers[name](orms, req);
      // the ORM's work done (Prisma's transaction "committed"), the claim's
      // transaction not yet: a held request waits here
      if (req.body.gate) await req.idempotency.client.query(`SELECT pg_advisory_xact_lock_shared(${GATE})`);
      res.status(201).json({ order_id: id, sku: req.body.sku ?? null });
    });
  }
  const server = await new Promise((resolve) => {
    const s = app.listen(0, '127.0.0.1', () => resolve(s));
  });
  return {
    url: `http://127.0.0.1:${server.address().port}`,
    close: async () => {
      await new Promise((resolve) => { server.closeAllConnections(); server.close(resolve); });
      await prisma.$disconnect();
      await dataSource.destroy();
      await pool.end();
    },
  };
}
