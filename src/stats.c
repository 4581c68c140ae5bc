/*
 * stats.c
 *	  Cluster-wide counters behind the idempotency_stats view: one
 *	  pg_atomic_uint64 per counter in shared memory, which exists only when
 *	  the library is in shared_preload_libraries.  Without it, counting is a
 *	  no-op and the view raises 55000 with a hint.
 *
 * Counters are not transactional (like pg_stat_statements' calls): a claim
 * counted in a transaction that later rolls back stays counted.
 *
 * The time duplicates waited is a histogram in the same block, in the shape
 * Prometheus reads (postgres_exporter's HISTOGRAM columns): fixed upper
 * bounds (le), a cumulative count per bound, a sum and a count.  Only a wait
 * adds to it, with one clock read and three atomic additions; a claim that
 * does not wait costs nothing more.
 */
#include "postgres.h"

#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "catalog/pg_type.h"
#include "port/atomics.h"
#include "utils/array.h"
#include "utils/timestamp.h"

#include "shmem_blocks.h"
#include "stats.h"

/*
 * Upper bounds of the wait_seconds buckets, in microseconds: from a lock
 * handed over at once to a lease of minutes.  Fixed, so that rates of
 * buckets add up across servers and restarts.  Keep README's list in step.
 */
static const int64 wait_bounds_us[] = {
	1000, 5000, 10000, 50000, 100000, 500000,
	1000000, 5000000, 10000000, 30000000, 60000000, 300000000
};

#define WAIT_BUCKETS lengthof(wait_bounds_us)

/* The shared block: the counters and when they were last reset */
typedef struct IdemSharedStats
{
	pg_atomic_uint64 counters[IDEM_NUM_COUNTERS];
	pg_atomic_uint64 reset_at;	/* TimestampTz */
	pg_atomic_uint64 outcome_waits;
	/* waits per bucket, not cumulative; the last one is above every bound */
	pg_atomic_uint64 wait_buckets[WAIT_BUCKETS + 1];
	pg_atomic_uint64 wait_us_sum;
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
	pg_atomic_init_u64(&stats->outcome_waits, 0);
	for (int i = 0; i <= (int) WAIT_BUCKETS; i++)
		pg_atomic_init_u64(&stats->wait_buckets[i], 0);
	pg_atomic_init_u64(&stats->wait_us_sum, 0);
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

/*
 * A duplicate stopped waiting (kind says for what) that began to wait at
 * started: count it (waits or outcome_waits) and add its time to the
 * histogram.  A no-op when the library was not preloaded.
 */
void
idem_stats_wait_ended(IdemWaitKind kind, TimestampTz started)
{
	int64		waited;
	int			bucket = 0;

	if (idem_shared_stats == NULL)
		return;
	waited = Max(GetCurrentTimestamp() - started, 0);
	while (bucket < (int) WAIT_BUCKETS && waited > wait_bounds_us[bucket])
		bucket++;
	if (kind == IDEM_WAIT_KEY)
		pg_atomic_fetch_add_u64(&idem_shared_stats->counters[IDEM_COUNT_WAITS], 1);
	else
		pg_atomic_fetch_add_u64(&idem_shared_stats->outcome_waits, 1);
	pg_atomic_fetch_add_u64(&idem_shared_stats->wait_buckets[bucket], 1);
	pg_atomic_fetch_add_u64(&idem_shared_stats->wait_us_sum, (uint64) waited);
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
 * idem_wait_stats() RETURNS (outcome_waits bigint, wait_seconds float8[],
 *							   wait_seconds_bucket bigint[],
 *							   wait_seconds_sum float8,
 *							   wait_seconds_count bigint)
 *	  The time duplicates waited (from version 1.1; the idempotency_stats
 *	  view appends it to idem_stats): the claims that waited for an
 *	  outcome, the buckets' upper bounds in seconds, the waits at or below
 *	  each bound (cumulative), the seconds and the number of all waits
 *	  (those above the last bound included).  Errors: 55000 library not
 *	  preloaded.
 */
PG_FUNCTION_INFO_V1(idem_wait_stats);
Datum
idem_wait_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[5];
	bool		nulls[5] = {false};
	Datum		bounds[WAIT_BUCKETS];
	Datum		cumulative[WAIT_BUCKETS];
	uint64		count = 0;

	require_shared_stats();
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_wait_stats must return a composite type");

	for (int i = 0; i <= (int) WAIT_BUCKETS; i++)
	{
		count += pg_atomic_read_u64(&idem_shared_stats->wait_buckets[i]);
		if (i < (int) WAIT_BUCKETS)
		{
			bounds[i] = Float8GetDatum(wait_bounds_us[i] / 1000000.0);
			cumulative[i] = Int64GetDatum((int64) count);
		}
	}
	values[0] = Int64GetDatum((int64)
							  pg_atomic_read_u64(&idem_shared_stats->outcome_waits));
	values[1] = PointerGetDatum(construct_array(bounds, WAIT_BUCKETS, FLOAT8OID,
												sizeof(float8), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(cumulative, WAIT_BUCKETS, INT8OID,
												sizeof(int64), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[3] = Float8GetDatum(pg_atomic_read_u64(&idem_shared_stats->wait_us_sum) /
							   1000000.0);
	values[4] = Int64GetDatum((int64) count);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

/*
 * idem_stats_reset() RETURNS void
 *	  Set every counter and the wait histogram to zero, and stats_reset to
 *	  now.  Counters are reset
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
	pg_atomic_write_u64(&idem_shared_stats->outcome_waits, 0);
	for (int i = 0; i <= (int) WAIT_BUCKETS; i++)
		pg_atomic_write_u64(&idem_shared_stats->wait_buckets[i], 0);
	pg_atomic_write_u64(&idem_shared_stats->wait_us_sum, 0);
	pg_atomic_write_u64(&idem_shared_stats->reset_at,
						(uint64) GetCurrentTimestamp());
	PG_RETURN_VOID();
}
