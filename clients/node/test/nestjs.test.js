// What the NestJS integration adds to the Express middleware: the bind
// hook (IdempotencyTransaction.bound(): what it makes of the claim's client,
// once per request, its writes committed with the stored response or rolled
// back with a handler error), IdempotencyTransaction outside an
// @Idempotent() route, a class-level @Idempotent(); on the Express platform
// and on the Fastify one (the shared behaviour suites run on both too:
// nestjs and nestjs-fastify in helpers.js).
import assert from 'node:assert/strict';
import { after, before, describe, test } from 'node:test';
import common from '@nestjs/common';
import core from '@nestjs/core';
import platformFastify from '@nestjs/platform-fastify';
import pg from 'pg';
import {
  Idempotent, IdempotencyInterceptor, IdempotencyModule, IdempotencyTransaction,
} from '../src/nestjs.js';
import {
  DIRECT, POOLED, ordersOf, post, setupDatabase, sql, uniqueKey,
} from './helpers.js';

const {
  Body, Controller, Get, HttpCode, Inject, Injectable, Module, Post,
} = common;
const { NestFactory, Reflector } = core;
const { FastifyAdapter } = platformFastify;

await setupDatabase();

function decorate(proto, name, ...decorators) {
  const descriptor = Object.getOwnPropertyDescriptor(proto, name);
  for (const decorator of decorators) decorator(proto, name, descriptor);
}

// an "ORM" bound to the claim's client: a repository of orders, counting
// how many times bind ran
let binds = 0;
// how many times a handler ran: a replay runs none
let runs = 0;
const failedOnce = new Set();
const bind = (client) => {
  binds += 1;
  return { insert: (key, sku) => client.query('INSERT INTO orders (idempotency_key, sku) VALUES ($1, $2) RETURNING id', [key, sku]) };
};

async function buildApp(pool, adapter) {
  class Orders {
    constructor(tx) { this.tx = tx; }

    // two writes through the bound object: one bind per request
    async place(body) {
      runs += 1;
      const repo = await this.tx.bound();
      const { rows } = await repo.insert(this.tx.idempotency.key, body.sku);
      await (await this.tx.bound()).insert(this.tx.idempotency.key, `${body.sku}-2`);
      if (body.failOnce && !failedOnce.has(body.sku)) {
        failedOnce.add(body.sku);
        throw new Error('the handler failed after its writes');
      }
      return { order_id: rows[0].id };
    }

    clientOutside() { return this.tx.client; }
  }
  Injectable()(Orders);
  Inject(IdempotencyTransaction)(Orders, undefined, 0);

  class OrdersController {
    constructor(orders) { this.orders = orders; }

    create(body) { return this.orders.place(body); }

    outside() { return { client: Boolean(this.orders.clientOutside()) }; }
  }
  Inject(Orders)(OrdersController, undefined, 0);
  decorate(OrdersController.prototype, 'create', Post('orders'));
  Body()(OrdersController.prototype, 'create', 0);
  decorate(OrdersController.prototype, 'outside', Post('outside'), HttpCode(200));
  Controller()(OrdersController);

  // @Idempotent() on the class: every method of the controller
  class TaggedController {
    constructor(orders) { this.orders = orders; }

    create(body) { return this.orders.place(body); }
  }
  Inject(Orders)(TaggedController, undefined, 0);
  decorate(TaggedController.prototype, 'create', Post());
  Body()(TaggedController.prototype, 'create', 0);
  Idempotent({ waitFor: 0 })(TaggedController);
  Controller('tagged')(TaggedController);

  decorate(OrdersController.prototype, 'create', Idempotent());

  class AppModule {}
  Module({
    imports: [IdempotencyModule.forRoot({ pool, scope: 'nest-test', bind })],
    controllers: [OrdersController, TaggedController],
    providers: [Orders],
  })(AppModule);
  const app = await NestFactory.create(AppModule, ...(adapter ? [adapter] : []), { logger: false });
  await app.listen(0, '127.0.0.1');
  const server = app.getHttpServer();
  return { app, url: `http://127.0.0.1:${server.address().port}` };
}

const PLATFORMS = [['Express', () => undefined], ['Fastify', () => new FastifyAdapter()]];
const DSNS = [['direct', DIRECT], ...(POOLED ? [['pgbouncer', POOLED]] : [])];
for (const [platform, adapter] of PLATFORMS) {
  for (const [target, dsn] of DSNS) {
    describe(`NestJS on ${platform}, ${target}`, () => {
      let pool;
      let nest;
      before(async () => {
        pool = new pg.Pool({ connectionString: dsn, max: 4 });
        nest = await buildApp(pool, adapter());
      });
      after(async () => {
        await nest.app.close();
        await pool.end();
      });

      test('bind: the bound object writes in the claim\'s transaction, made once per request', async () => {
        for (const path of ['/orders', '/tagged']) {
          const key = uniqueKey(`nest-bind-${target}`);
          const before = binds;
          const runsBefore = runs;
          const first = await post(nest.url, path, { key, body: { sku: key } });
          assert.equal(first.status, 201, path);
          assert.equal(binds, before + 1, `${path}: one bind for two uses`);
          const again = await post(nest.url, path, { key, body: { sku: key } });
          assert.equal(again.headers['idempotent-replayed'], 'true', path);
          assert.ok(again.body.equals(first.body));
          assert.equal(runs, runsBefore + 1, `${path}: the replay did not run the handler`);
          assert.deepEqual(await ordersOf([key]), { [key]: 2 }, `${path}: both writes, once`);
          assert.equal((await sql("SELECT status FROM idempotent_record WHERE key = $1", [key]))[0].status, 'succeeded');
        }
      });

      test('a handler error after writes through the bound object: 500, nothing kept, the retry runs once', async () => {
        const key = uniqueKey(`nest-bind-fail-${target}`);
        const body = { sku: key, failOnce: true };
        const failed = await post(nest.url, '/orders', { key, body });
        assert.equal(failed.status, 500);
        assert.deepEqual(await ordersOf([key]), {});
        assert.equal((await sql('SELECT count(*)::int AS n FROM idempotent_record WHERE key = $1', [key]))[0].n, 0);
        const retry = await post(nest.url, '/orders', { key, body });
        assert.equal(retry.status, 201);
        assert.deepEqual(await ordersOf([key]), { [key]: 2 });
        assert.equal((await post(nest.url, '/orders', { key, body })).headers['idempotent-replayed'], 'true');
      });

      test('IdempotencyTransaction outside an @Idempotent() route throws: 500', async () => {
        const r = await post(nest.url, '/outside', { body: {} });
        assert.equal(r.status, 500);
      });
    });
  }
}

// a platform neither Express nor Fastify (its request and response have
// neither's methods): refused before anything is claimed
test('another platform is refused: the interceptor throws, the pool untouched, the handler not run', () => {
  class Elsewhere {
    create() {}
  }
  decorate(Elsewhere.prototype, 'create', Idempotent());
  const pool = { connect: () => assert.fail('the pool was used') };
  const interceptor = new IdempotencyInterceptor(new Reflector(), { pool, scope: 'nest-test' });
  const context = {
    getType: () => 'http',
    getHandler: () => Elsewhere.prototype.create,
    getClass: () => Elsewhere,
    switchToHttp: () => ({ getRequest: () => ({ headers: { 'idempotency-key': 'k' } }), getResponse: () => ({}) }),
  };
  assert.throws(() => interceptor.intercept(context, { handle: () => assert.fail('the handler ran') }),
    /runs on the Express or Fastify platform of NestJS/);
});
