// NestJS 11 (10 has the same API), Express or Fastify platform:
// IdempotencyModule.forRoot(options) and @Idempotent(routeOptions) on a
// controller method (or controller), which binds IdempotencyInterceptor to
// it. On Express the interceptor runs the middleware of express.js on the
// route's request and response; on Fastify it claims the key as the
// plugin of fastify.js does in preHandler, and the plugin's other hooks,
// which the module adds to Nest's Fastify instance before Nest adds its
// routes, record the answer in onSend (the claim, the held answer recorded
// with the claim's transaction, the shared answers). It runs the handler in
// an AsyncLocalStorage context, so that the IdempotencyTransaction provider
// gives any service the controller calls the claim's client, or what the
// module's `bind` hook makes of it (an ORM's transaction).
import 'reflect-metadata';
import { AsyncLocalStorage } from 'node:async_hooks';
import { METHODS } from 'node:http';
import common from '@nestjs/common';
import core from '@nestjs/core';
import { NEVER, from, mergeMap } from 'rxjs';
import { idempotency as expressIdempotency } from './express.js';
import {
  claimedAlready, enterRequest, hookedRoute, idempotencyHooks,
} from './fastify.js';
import { resolveOptions, routeOptions } from './options.js';

const {
  Global, Inject, Injectable, Logger, Module, SetMetadata, UseInterceptors, applyDecorators,
} = common;
const { HttpAdapterHost, Reflector } = core;

/** The injection token of the module's options. */
export const IDEMPOTENCY_OPTIONS = Symbol.for('pg-idempotency-key:options');
const ROUTE = 'pg-idempotency-key:route';
const FASTIFY_HOOKS = Symbol.for('pg-idempotency-key:fastify-hooks');

// the request in flight of this async context: {api, bound}
const storage = new AsyncLocalStorage();

// every method: a decorated route is handled whatever its method
const EVERY_METHOD = METHODS;

// An error of the outcome (nothing committed) comes after Nest's pipeline
// for the request is over: it is answered and logged as Nest's own
// exception handler does an unknown error.
const exceptionsLogger = new Logger('ExceptionsHandler');
function answerLate(res, err) {
  exceptionsLogger.error(err.message, err.stack);
  if (res.headersSent) {
    res.destroy();
    return;
  }
  const body = JSON.stringify({ statusCode: 500, message: 'Internal server error' });
  for (const name of res.getHeaderNames()) res.removeHeader(name);
  res.writeHead(500, { 'content-type': 'application/json; charset=utf-8', 'content-length': Buffer.byteLength(body) });
  res.end(body);
}

// Runs the Express middleware: -> true when it passed the request on (the
// handler is to run), false when it answered (a replay, 409, a problem);
// rejects with what it passed to next(err) before that, answerLate() after.
function enter(middleware, req, res) {
  return new Promise((resolve, reject) => {
    let entered = false;
    const next = (err) => {
      if (entered) {
        if (err) answerLate(res, err);
        return;
      }
      entered = true;
      if (err) reject(err); else resolve(true);
    };
    const done = middleware(req, res, next);
    Promise.resolve(done).then(() => resolve(false), reject);
  });
}

// The plugin's claim on a Fastify request: -> true when the handler is to
// run (also a re-run after a conflict at COMMIT, claimed again already),
// false when it answered.
async function enterFastify(o, request, reply) {
  if (!hookedRoute(request)) {
    throw new Error('idempotency: the route was added to Fastify before IdempotencyModule\'s hooks: its outcome'
      + ' could not be recorded');
  }
  if (claimedAlready(request)) return true;
  return enterRequest(o, request, reply);
}

// Express's response has setHeader(), Fastify's reply has hijack() and raw
const isExpress = (req, res) => typeof res.setHeader === 'function' && typeof req.get === 'function';
const isFastify = (res) => typeof res.hijack === 'function' && res.raw !== undefined;

export class IdempotencyInterceptor {
  constructor(reflector, options) {
    this.reflector = reflector;
    this.options = options;
    this.entries = new WeakMap();
  }

  // the entry of a route (the Express middleware, or the Fastify claim)
  // for its settings, made once
  entryOf(route) {
    let entry = this.entries.get(route);
    if (!entry) {
      const { bind, ...base } = this.options;
      const o = routeOptions(resolveOptions(base), route);
      const express = expressIdempotency({ ...base, ...route, methods: EVERY_METHOD });
      entry = (req, res) => (isExpress(req, res) ? enter(express, req, res) : enterFastify(o, req, res));
      this.entries.set(route, entry);
    }
    return entry;
  }

  intercept(context, next) {
    // on the method, else on the controller
    const route = this.reflector.getAllAndOverride(ROUTE, [context.getHandler(), context.getClass()]);
    if (context.getType() !== 'http' || route === undefined) return next.handle();
    const http = context.switchToHttp();
    const req = http.getRequest();
    const res = http.getResponse();
    if (!isExpress(req, res) && !isFastify(res)) {
      throw new Error('idempotency: @Idempotent() runs on the Express or Fastify platform of NestJS'
        + ' (@nestjs/platform-express, @nestjs/platform-fastify); on another platform the route would not be'
        + ' protected');
    }
    return from(this.entryOf(route)(req, res)).pipe(mergeMap((passed) => {
      // answered by the middleware itself: Nest must not answer again (its
      // reply would set the route's status on a response already sent)
      if (!passed) return NEVER;
      const store = { api: req.idempotency, bound: null, bind: this.options.bind, req };
      // next.handle() binds the handler to the async context it is called in
      return storage.run(store, () => next.handle());
    }));
  }
}
Injectable()(IdempotencyInterceptor);
Inject(Reflector)(IdempotencyInterceptor, undefined, 0);
Inject(IDEMPOTENCY_OPTIONS)(IdempotencyInterceptor, undefined, 1);

/**
 * The request's transaction, for the services an @Idempotent() route calls:
 * `client` (the claim's pg client), `begin()`, `bound()` (the module's
 * `bind` hook applied to the client once per request), `idempotency` (what
 * Express handlers get as req.idempotency).
 */
export class IdempotencyTransaction {
  get current() {
    const store = storage.getStore();
    if (!store) {
      throw new Error('idempotency: no idempotent request in this context: IdempotencyTransaction serves the code'
        + ' that a route decorated with @Idempotent() runs');
    }
    return store;
  }

  get idempotency() { return this.current.api; }

  get client() { return this.current.api.client; }

  begin() { return this.current.api.begin(); }

  bound() {
    const store = this.current;
    if (!store.bound) {
      if (typeof store.bind !== 'function') {
        throw new Error('idempotency: bound() needs the "bind" option of IdempotencyModule.forRoot');
      }
      store.bound = store.api.begin().then((client) => store.bind(client, store.req));
    }
    return store.bound;
  }
}
Injectable()(IdempotencyTransaction);

/** Marks a controller method (or every method of a controller) idempotent, with settings of its own (all but pool). */
export function Idempotent(settings = {}) {
  return applyDecorators(SetMetadata(ROUTE, settings), UseInterceptors(IdempotencyInterceptor));
}

async function fastifyHooksOn(host) {
  const adapter = host && host.httpAdapter;
  if (!adapter || adapter.getType() !== 'fastify') return false;
  await adapter.getInstance().register(idempotencyHooks);
  return true;
}

export class IdempotencyModule {
  /**
   * The module, global: options are those of expressIdempotency (pool and
   * scope required; the scope function gets the Express request, or the
   * Fastify one on that platform), plus
   * `bind(client, req)`, what IdempotencyTransaction.bound() gives.
   */
  static forRoot(options) {
    const { bind, ...rest } = options ?? {};
    resolveOptions(rest); // a missing pool or scope fails at startup
    if (bind !== undefined && typeof bind !== 'function') throw new TypeError('idempotency: "bind" must be a function');
    return {
      module: IdempotencyModule,
      global: true,
      providers: [
        { provide: IDEMPOTENCY_OPTIONS, useValue: options },
        // on the Fastify platform, the plugin's hooks on Nest's instance,
        // in place before Nest adds its routes (at init)
        { provide: FASTIFY_HOOKS, useFactory: fastifyHooksOn, inject: [HttpAdapterHost] },
        IdempotencyInterceptor,
        IdempotencyTransaction,
      ],
      exports: [IDEMPOTENCY_OPTIONS, IdempotencyInterceptor, IdempotencyTransaction],
    };
  }
}
Global()(IdempotencyModule);
Module({})(IdempotencyModule);
