// The tests' routes as a NestJS application (Express platform, or Fastify
// with platform 'fastify'), in plain JavaScript: decorators applied as functions. Each handler runs in a
// service that reaches the request's transaction through the injected
// IdempotencyTransaction (AsyncLocalStorage), not through the request.
// The order routes return their value for Nest to send (the usual style);
// the others answer with @Res(), as Express handlers would.
import express from 'express';
import common from '@nestjs/common';
import core from '@nestjs/core';
import platformFastify from '@nestjs/platform-fastify';
import { Idempotent, IdempotencyModule, IdempotencyTransaction } from '../src/nestjs.js';

const {
  Controller, Inject, Injectable, Module, Post, Req, Res,
} = common;
const { NestFactory } = core;
const { FastifyAdapter } = platformFastify;

// headers set on Express's response or on Fastify's reply
const withHeaders = (res, headers) => (typeof res.set === 'function' ? res.set(headers) : res.headers(headers));

// method decorators applied to prototype[name] as TypeScript would
function decorate(proto, name, ...decorators) {
  const descriptor = Object.getOwnPropertyDescriptor(proto, name);
  for (const decorator of decorators) decorator(proto, name, descriptor);
}

export async function buildNest(options, {
  handlers, routes, tenantOf, placeOrder, platform = 'express',
}) {
  class OrderService {
    constructor(tx) { this.tx = tx; }

    run(name, body, tenant, reply, query) {
      return handlers[name](this.tx.idempotency, body, tenant, reply, query);
    }

    place(body, tenant) {
      return placeOrder(this.tx.client, this.tx.idempotency.key, body, tenant);
    }
  }
  Injectable()(OrderService);
  Inject(IdempotencyTransaction)(OrderService, undefined, 0);

  class OrdersController {
    constructor(orders) { this.orders = orders; }
  }
  Inject(OrderService)(OrdersController, undefined, 0);
  const proto = OrdersController.prototype;
  routes.forEach(([path, name, routeOptions], i) => {
    const method = `route${i}`;
    if (name === 'order') {
      // the value returned, sent by Nest (201 for a POST); the headers on
      // the response Nest passes through
      proto[method] = async function order(req, res) {
        let value;
        await this.orders.run(name, req.body, tenantOf(req), (status, headers, body) => {
          withHeaders(res, headers);
          value = JSON.parse(body);
        }, req.query);
        return value;
      };
      decorate(proto, method, Post(path), Idempotent(routeOptions));
      Req()(proto, method, 0);
      Res({ passthrough: true })(proto, method, 1);
    } else {
      proto[method] = async function answer(req, res) {
        await this.orders.run(name, req.body, tenantOf(req), (status, headers, body) => {
          withHeaders(res.status(status), headers).send(body);
        }, req.query);
      };
      decorate(proto, method, Post(path), Idempotent(routeOptions));
      Req()(proto, method, 0);
      Res()(proto, method, 1);
    }
  });
  // answers twice: res.end() after res.json()
  proto.twice = async function twice(req, res) {
    const id = await this.orders.place(req.body, tenantOf(req));
    if (platform === 'fastify') {
      res.code(201).send({ order_id: id });
      res.send('a second answer');
    } else {
      res.status(201).json({ order_id: id });
      res.end('a second answer');
    }
  };
  decorate(proto, 'twice', Post('/orders/twice'), Idempotent());
  Req()(proto, 'twice', 0);
  Res()(proto, 'twice', 1);
  Controller()(OrdersController);

  class AppModule {}
  Module({
    imports: [IdempotencyModule.forRoot({ scope: tenantOf, ...options })],
    controllers: [OrdersController],
    providers: [OrderService],
  })(AppModule);

  if (platform === 'fastify') {
    const app = await NestFactory.create(AppModule, new FastifyAdapter(), { logger: false });
    app.getHttpAdapter().getInstance().addContentTypeParser('application/octet-stream', { parseAs: 'buffer' },
      (req, body, done) => done(null, body));
    return app;
  }
  const app = await NestFactory.create(AppModule, { logger: false });
  app.use(express.raw({ type: 'application/octet-stream' }));
  return app;
}
