/*
 * stats.c
 *	  Cluster-wide counters behind the idempotency_stats view: one
 *	  pg_atomic_uint64 per counter in shared memory, which exists only when
 *	  the library is in shared_preload_libraries.  Without it, counting is a
 *	  no-op and the view raises 55000 with a hint.
 *
 * Counters are not transactional (like pg_stat_statements' calls): a claim
 * counted in a transaction that later rolls back stays counted.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "port/atomics.h"
#include "utils/timestamp.h"

#include "shmem_blocks.h"
#include "stats.h"

/* The shared block: the counters and when they were last reset */
typedef struct IdemSharedStats
{
	pg_atomic_uint64 counters[IDEM_NUM_COUNTERS];
	pg_atomic_uint64 reset_at;	/* TimestampTz */
} IdemSharedStats;

/* NULL unless the library was preloaded (then set in every process) */
static IdemSharedStats *idem_shared_stats = NULL;

/* Set up the counters: zero, reset now (a crash restart starts afresh) */
static void
stats_shmem_init(void *block)
{
	IdemSharedStats *stats = block;

	for (int i = 0; i < IDEM_NUM_COUNTERS; i++)
		pg_atomic_init_u64(&stats->counters[i], 0);
	pg_atomic_init_u64(&stats->reset_at, (uint64) GetCurrentTimestamp());
}

/*
 * Called from _PG_init: the counters live in shared memory when the library
 * is preloaded; otherwise they stay unavailable.
 */
void
idem_stats_init(void)
{
	idem_shmem_register("idempotency counters", sizeof(IdemSharedStats),
						stats_shmem_init, (void **) &idem_shared_stats);
}

/* Add n to counter c; a no-op when the library was not preloaded */
void
idem_count_n(IdemCounter c, uint64 n)
{
	Assert((int) c >= 0 && c < IDEM_NUM_COUNTERS);
	if (idem_shared_stats != NULL && n > 0)
		pg_atomic_fetch_add_u64(&idem_shared_stats->counters[c], n);
}

/* Add one to counter c; a no-op when the library was not preloaded */
void
idem_count(IdemCounter c)
{
	idem_count_n(c, 1);
}

/* 55000 unless the shared counters exist */
static void
require_shared_stats(void)
{
	if (idem_shared_stats == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("idempotency counters are not available"),
				errdetail("The idempotency library was not loaded through shared_preload_libraries, so the server keeps no counters for it."),
				errhint("Add idempotency to shared_preload_libraries in postgresql.conf and restart the server."));
}

/*
 * idem_stats() RETURNS (claims bigint, ..., rows_purged bigint,
 *						  stats_reset timestamptz)
 *	  The cluster-wide counters, in IdemCounter order, and the time of the
 *	  last reset (or of the server start).  The idempotency_stats view
 *	  selects from it.  Errors: 55000 library not preloaded.
 */
PG_FUNCTION_INFO_V1(idem_stats);
Datum
idem_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[IDEM_NUM_COUNTERS + 1];
	bool		nulls[IDEM_NUM_COUNTERS + 1] = {false};

	require_shared_stats();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_stats must return a composite type");
	if (desc->natts != IDEM_NUM_COUNTERS + 1)
		elog(ERROR, "idem_stats returns %d columns, the library has %d counters",
			 desc->natts, IDEM_NUM_COUNTERS + 1);

	for (int i = 0; i < IDEM_NUM_COUNTERS; i++)
		values[i] = Int64GetDatum((int64)
								  pg_atomic_read_u64(&idem_shared_stats->counters[i]));
	values[IDEM_NUM_COUNTERS] =
		TimestampTzGetDatum((TimestampTz)
							pg_atomic_read_u64(&idem_shared_stats->reset_at));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

/*
 * idem_stats_reset() RETURNS void
 *	  Set every counter to zero and stats_reset to now.  Counters are reset
 *	  one by one: a call counted meanwhile may survive the reset.  Revoked
 *	  from PUBLIC.  Errors: 55000 library not preloaded.
 */
PG_FUNCTION_INFO_V1(idem_stats_reset);
Datum
idem_stats_reset(PG_FUNCTION_ARGS)
{
	require_shared_stats();
	for (int i = 0; i < IDEM_NUM_COUNTERS; i++)
		pg_atomic_write_u64(&idem_shared_stats->counters[i], 0);
	pg_atomic_write_u64(&idem_shared_stats->reset_at,
						(uint64) GetCurrentTimestamp());
	PG_RETURN_VOID();
}
