// Types of pg-idempotency-key/prisma and pg-idempotency-key/typeorm: the
// ORM's own transaction object in the claim's transaction.
import type { IdempotencyHandle } from './index.js';

/** Thrown for a statement of the PrismaClient itself inside prismaTransaction() (not of its tx). */
export class OutsideTransaction extends Error {}

/**
 * The adapter factory (`new PrismaPg(pool)`) for `new PrismaClient({ adapter })`:
 * unchanged outside prismaTransaction(), bound to the request's claim inside it.
 */
export function idempotentAdapter<F extends { connect(): Promise<unknown> }>(factory: F): F;

/**
 * `prisma.$transaction(fn, options)` in the claim's transaction of `idempotency`
 * (req.idempotency): Prisma's BEGIN and COMMIT are not sent, the package commits
 * with the stored response; its rollback leaves nothing and answers 500.
 */
export function prismaTransaction<P extends { $transaction(fn: (tx: any) => Promise<any>, options?: any): Promise<any> }, R>(
  prisma: P,
  idempotency: IdempotencyHandle,
  fn: (tx: Parameters<Parameters<P['$transaction']>[0]>[0]) => Promise<R>,
  options?: { maxWait?: number; timeout?: number; isolationLevel?: string },
): Promise<R>;

/**
 * An EntityManager (of `dataSource.createQueryRunner()`) whose QueryRunner holds the claim's
 * client in its transaction; `manager.transaction()` inside it is a savepoint.
 */
export function typeormManager<D extends { createQueryRunner(): { manager: any } }>(
  dataSource: D,
  idempotency: IdempotencyHandle,
): Promise<ReturnType<D['createQueryRunner']>['manager']>;
