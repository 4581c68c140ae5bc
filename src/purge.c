/*
 * purge.c
 *	  idem_purge: delete one batch of expired records, then of expired
 *	  single-use tokens.  Small batches and SKIP LOCKED keep it from holding
 *	  long locks or waiting for claims; idem_purge_all (SQL) commits batch
 *	  after batch.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "attached_code.h"
#include "extension_relation.h"
#include "outbox.h"
#include "record_store.h"
#include "stats.h"
#include "tokens.h"

/*
 * A foreign key that references either table would fail a whole batch on
 * one referenced row: purge refuses to start while one exists (55000).
 */
static void
refuse_referenced_tables(Oid fn)
{
	Oid			namespace = get_func_namespace(fn);

	idem_refuse_referencing_keys(idem_extension_relation("idempotent_record", namespace));
	idem_refuse_referencing_keys(idem_extension_relation("idempotency_token", namespace));
	if (OidIsValid(get_relname_relid("idempotency_outbox", namespace)))
		idem_refuse_referencing_keys(get_relname_relid("idempotency_outbox", namespace));
}

/*
 * idem_purge(batch_size integer) RETURNS bigint
 *	  Delete up to batch_size rows expired at the server's clock: records
 *	  first (never one under a live lease or awaiting reconciliation, never
 *	  one a claim is writing), then tokens; returns how many went.  Errors:
 *	  22004 NULL, 22023 batch_size < 1, 25006 read-only transaction or
 *	  standby, 55000 a foreign key references either table.
 */
PG_FUNCTION_INFO_V1(idem_purge);
Datum
idem_purge(PG_FUNCTION_ARGS)
{
	int32		batch_size;
	int64		purged;
	TimestampTz now;

	idem_require_arg(fcinfo, 0, "batch_size", "idem_purge");
	batch_size = PG_GETARG_INT32(0);
	if (batch_size < 1)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("batch_size must be at least 1"),
				errdetail("The batch_size given is %d.", batch_size));

	idem_require_read_write("idem_purge");
	refuse_referenced_tables(fcinfo->flinfo->fn_oid);
	now = GetCurrentTimestamp();
	idem_store_begin(fcinfo->flinfo->fn_oid, false, NULL);
	purged = idem_store_purge(now, batch_size);
	idem_store_end();
	if (purged < batch_size)
		purged += idem_tokens_purge(fcinfo->flinfo->fn_oid, now, batch_size - purged);
	if (purged < batch_size)
		purged += idem_outbox_purge(fcinfo->flinfo->fn_oid, now, batch_size - purged);
	idem_count_n(IDEM_COUNT_ROWS_PURGED, purged);
	PG_RETURN_INT64(purged);
}
