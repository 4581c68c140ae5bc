// TypeORM (postgres driver, on node-postgres): an EntityManager whose
// QueryRunner holds the claim's client inside its transaction.
//
//   const manager = await typeormManager(dataSource, req.idempotency);
//   await manager.insert(Order, { sku });
//
// The QueryRunner starts with its transaction active (depth 1), so TypeORM
// sends no START TRANSACTION of its own: save() and friends write in the
// claim's transaction, and manager.transaction(...) inside it is a
// SAVEPOINT (rolled back to on error, as TypeORM nests). Ending the
// outer transaction (queryRunner.commitTransaction(), rollbackTransaction(),
// a COMMIT in manager.query) reaches the guard, which refuses it: the
// request answers 500 transaction-ended with nothing committed. The
// runner is released with the request (release() returns nothing to the
// DataSource's pool: the package releases the client).

// typeormManager(dataSource, idempotency) -> EntityManager in the claim's
// transaction (req.idempotency; or, on a route where the key is optional
// and none came, a transaction of its own committed with a success)
export async function typeormManager(dataSource, idempotency) {
  const client = await idempotency.begin();
  const runner = dataSource.createQueryRunner();
  runner.databaseConnection = client;
  runner.isTransactionActive = true;
  runner.transactionDepth = 1;
  return runner.manager;
}
