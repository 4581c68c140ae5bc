// Type declarations of pg-idempotency-key/nestjs.
import type { CallHandler, DynamicModule, ExecutionContext, NestInterceptor } from '@nestjs/common';
import type { Reflector } from '@nestjs/core';
import type { Request } from 'express';
import type { FastifyRequest } from 'fastify';
import type { PoolClient } from 'pg';
import type { Observable } from 'rxjs';
import type { IdempotencyHandle, IdempotencyOptions } from './index.js';

export type { IdempotencyHandle, IdempotencyOptions } from './index.js';

/** The request of an @Idempotent() route: Express's, or Fastify's on @nestjs/platform-fastify. */
export type NestRequest = Request | FastifyRequest;

/**
 * IdempotencyModule.forRoot's options: those of expressIdempotency (scope gets the platform's request),
 * plus the bind hook.
 */
export interface NestIdempotencyOptions<Bound = unknown> extends IdempotencyOptions<NestRequest> {
  /**
   * Makes what IdempotencyTransaction.bound() gives from the claim's client, once per request
   * (an ORM's transaction object over that client).
   */
  bind?: (client: PoolClient, req: NestRequest) => Bound | Promise<Bound>;
}

/** The injection token of the module's options. */
export const IDEMPOTENCY_OPTIONS: unique symbol;

export class IdempotencyModule {
  /** The module, global: registers IdempotencyInterceptor and IdempotencyTransaction. */
  static forRoot<Bound = unknown>(options: NestIdempotencyOptions<Bound>): DynamicModule;
}

/** Marks a controller method (or controller) idempotent, with settings of its own (all but pool). */
export function Idempotent(options?: Partial<Omit<IdempotencyOptions<NestRequest>, 'pool'>>): MethodDecorator & ClassDecorator;

export class IdempotencyInterceptor implements NestInterceptor {
  constructor(reflector: Reflector, options: NestIdempotencyOptions);
  intercept(context: ExecutionContext, next: CallHandler): Observable<unknown>;
}

/** The request's transaction, injectable into the services an @Idempotent() route calls. */
export class IdempotencyTransaction<Bound = unknown> {
  /** What an Express handler gets as req.idempotency (a Fastify one as request.idempotency); throws outside an @Idempotent() route. */
  readonly idempotency: IdempotencyHandle;
  /** The client in the claim's transaction (null in leased mode until begin()). */
  readonly client: PoolClient;
  /** The client in the transaction the outcome commits with. */
  begin(): Promise<PoolClient>;
  /** The forRoot bind hook's value for this request, made once on first use. */
  bound<T = Bound>(): Promise<T>;
}
