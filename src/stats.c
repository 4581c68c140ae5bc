/*
 * stats.c
 *	  The counters behind the idempotency_stats view, per database: one set
 *	  of pg_atomic_uint64 counters per database in shared memory, which
 *	  exists only when the library is in shared_preload_libraries.  Without
 *	  it, counting is a no-op and the view raises 55000 with a hint.
 *
 * A database takes a slot of the block (idempotency.stats_databases of
 * them, fixed at server start) at its first count or read of the view, and
 * keeps it while the server runs; a dropped database's slot is taken over,
 * zeroed, by a database that finds none free.  A database that finds none, free or
 * dropped, is not counted, and its view raises 55000: never the counts of
 * another database, whose claims, keys' traffic and tenants are not its
 * business.  The view reads the current database's slot only.
 *
 * Counters are not transactional (like pg_stat_statements' calls): a claim
 * counted in a transaction that later rolls back stays counted.  The
 * outbox's, which count messages, wait for the commit (stats_commit.c).
 *
 * The time duplicates waited is a histogram in the same slot, in the shape
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
#include "commands/dbcommands.h"
#include "port/atomics.h"
#include "storage/spin.h"
#include "utils/array.h"
#include "utils/syscache.h"
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

/* idempotency.stats_databases: slots of the block (init.c defines it) */
int			idem_stats_databases = 64;

/* One database's counters and when they were last reset */
typedef struct IdemDatabaseStats
{
	pg_atomic_uint32 database;	/* its OID; InvalidOid while the slot is free */
	pg_atomic_uint64 counters[IDEM_NUM_COUNTERS];
	pg_atomic_uint64 reset_at;	/* TimestampTz */
	pg_atomic_uint64 outcome_waits;
	/* waits per bucket, not cumulative; the last one is above every bound */
	pg_atomic_uint64 wait_buckets[WAIT_BUCKETS + 1];
	pg_atomic_uint64 wait_us_sum;
} IdemDatabaseStats;

/* The shared block: a slot per database */
typedef struct IdemSharedStats
{
	slock_t		mutex;			/* held to take a slot */
	int			nslots;
	IdemDatabaseStats slots[FLEXIBLE_ARRAY_MEMBER];
} IdemSharedStats;

/* NULL unless the library was preloaded (then set in every process) */
static IdemSharedStats *idem_shared_stats = NULL;

/* This backend's slot, once its database has one (kept for life) */
static IdemDatabaseStats *my_slot = NULL;

/* Zero slot's counters one by one (a call counted meanwhile may survive) */
static void
slot_zero(IdemDatabaseStats *slot, TimestampTz now)
{
	for (int i = 0; i < IDEM_NUM_COUNTERS; i++)
		pg_atomic_write_u64(&slot->counters[i], 0);
	pg_atomic_write_u64(&slot->outcome_waits, 0);
	for (int i = 0; i <= (int) WAIT_BUCKETS; i++)
		pg_atomic_write_u64(&slot->wait_buckets[i], 0);
	pg_atomic_write_u64(&slot->wait_us_sum, 0);
	pg_atomic_write_u64(&slot->reset_at, (uint64) now);
}

/* Set up the block: every slot free and zero (a crash restart starts afresh) */
static void
stats_shmem_init(void *block)
{
	IdemSharedStats *stats = block;

	SpinLockInit(&stats->mutex);
	stats->nslots = idem_stats_databases;
	for (int i = 0; i < stats->nslots; i++)
	{
		IdemDatabaseStats *slot = &stats->slots[i];

		pg_atomic_init_u32(&slot->database, InvalidOid);
		for (int c = 0; c < IDEM_NUM_COUNTERS; c++)
			pg_atomic_init_u64(&slot->counters[c], 0);
		pg_atomic_init_u64(&slot->reset_at, 0);
		pg_atomic_init_u64(&slot->outcome_waits, 0);
		for (int b = 0; b <= (int) WAIT_BUCKETS; b++)
			pg_atomic_init_u64(&slot->wait_buckets[b], 0);
		pg_atomic_init_u64(&slot->wait_us_sum, 0);
	}
}

/*
 * Called from _PG_init, after the settings: the counters live in shared
 * memory when the library is preloaded; otherwise they stay unavailable.
 */
void
idem_stats_init(void)
{
	idem_shmem_register("idempotency counters",
						add_size(offsetof(IdemSharedStats, slots),
								 mul_size(idem_stats_databases, sizeof(IdemDatabaseStats))),
						stats_shmem_init, (void **) &idem_shared_stats);
}

/*
 * Give slot to the current database, if it still belongs to was (InvalidOid:
 * free): its counters start from zero now.  Published after they are zero,
 * so that no one counts into another database's numbers.
 */
static bool
slot_take(IdemDatabaseStats *slot, Oid was, TimestampTz now)
{
	bool		taken = false;

	SpinLockAcquire(&idem_shared_stats->mutex);
	if (pg_atomic_read_u32(&slot->database) == was)
	{
		slot_zero(slot, now);
		pg_write_barrier();
		pg_atomic_write_u32(&slot->database, MyDatabaseId);
		taken = true;
	}
	SpinLockRelease(&idem_shared_stats->mutex);
	return taken;
}

/* The slot of the current database, if it has one */
static IdemDatabaseStats *
slot_find(void)
{
	for (int i = 0; i < idem_shared_stats->nslots; i++)
		if (pg_atomic_read_u32(&idem_shared_stats->slots[i].database) == MyDatabaseId)
			return &idem_shared_stats->slots[i];
	return NULL;
}

/*
 * The current database's counters: its slot, or a free one it takes, or,
 * with reclaim, the slot of a database that was dropped (read from the
 * catalog: not while an error propagates).  NULL when the library was not
 * preloaded, or every slot belongs to another database that exists.
 */
static IdemDatabaseStats *
database_slot(bool reclaim)
{
	TimestampTz now;

	if (my_slot != NULL || idem_shared_stats == NULL || !OidIsValid(MyDatabaseId))
		return my_slot;
	now = GetCurrentTimestamp();
	for (;;)
	{
		bool		full = true;

		if ((my_slot = slot_find()) != NULL)
			return my_slot;
		for (int i = 0; i < idem_shared_stats->nslots; i++)
		{
			IdemDatabaseStats *slot = &idem_shared_stats->slots[i];
			Oid			owner = pg_atomic_read_u32(&slot->database);

			if (owner == InvalidOid)
				full = false;
			if ((owner == InvalidOid ||
				 (reclaim && !SearchSysCacheExists1(DATABASEOID, ObjectIdGetDatum(owner)))) &&
				slot_take(slot, owner, now))
				return my_slot = slot;
		}
		/* another backend took the free slot first: look again */
		if (full)
			return NULL;
	}
}

/* Add n to counter c; a no-op without a slot */
void
idem_count_n(IdemCounter c, uint64 n)
{
	IdemDatabaseStats *slot;

	Assert((int) c >= 0 && c < IDEM_NUM_COUNTERS);
	if (n > 0 && (slot = database_slot(true)) != NULL)
		pg_atomic_fetch_add_u64(&slot->counters[c], n);
}

/*
 * Whether the current database's counters exist (taking its slot if it has
 * none yet): stats_commit.c asks while the catalog may be read
 */
bool
idem_stats_slot_ready(void)
{
	return database_slot(true) != NULL;
}

/* Add one to counter c; a no-op without a slot */
void
idem_count(IdemCounter c)
{
	idem_count_n(c, 1);
}

/*
 * A duplicate stopped waiting (kind says for what) that began to wait at
 * started: count it (waits or outcome_waits) and add its time to the
 * histogram.  A no-op without a slot.  It may run while an error
 * propagates (a canceled wait), so it reads no catalog.
 */
void
idem_stats_wait_ended(IdemWaitKind kind, TimestampTz started)
{
	IdemDatabaseStats *slot = database_slot(false);
	int64		waited;
	int			bucket = 0;

	if (slot == NULL)
		return;
	waited = Max(GetCurrentTimestamp() - started, 0);
	while (bucket < (int) WAIT_BUCKETS && waited > wait_bounds_us[bucket])
		bucket++;
	if (kind == IDEM_WAIT_KEY)
		pg_atomic_fetch_add_u64(&slot->counters[IDEM_COUNT_WAITS], 1);
	else
		pg_atomic_fetch_add_u64(&slot->outcome_waits, 1);
	pg_atomic_fetch_add_u64(&slot->wait_buckets[bucket], 1);
	pg_atomic_fetch_add_u64(&slot->wait_us_sum, (uint64) waited);
}

/*
 * The current database's slot, for the view and the reset: 55000 unless the
 * shared counters exist and the database has a slot
 */
static IdemDatabaseStats *
require_database_slot(void)
{
	IdemDatabaseStats *slot;

	if (idem_shared_stats == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("idempotency counters are not available"),
				errdetail("The idempotency library was not loaded through shared_preload_libraries, so the server keeps no counters for it."),
				errhint("Add idempotency to shared_preload_libraries in postgresql.conf and restart the server."));
	slot = database_slot(true);
	if (slot == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("idempotency counters are not available in database \"%s\"",
					   get_database_name(MyDatabaseId)),
				errdetail("The server keeps counters for %d databases (idempotency.stats_databases), and as many other databases hold them; calls in this database are not counted.",
						  idem_shared_stats->nslots),
				errhint("Raise idempotency.stats_databases and restart the server; a dropped database's counters go to the next database that needs them."));
	return slot;
}

/*
 * idem_stats() RETURNS (claims bigint, ..., rows_purged bigint,
 *						  stats_reset timestamptz)
 *	  The current database's counters, in IdemCounter order, and the time
 *	  of their last reset (or of the database's first count since the
 *	  server started).  The idempotency_stats view selects from it.
 *	  Errors: 55000 library not preloaded, or no slot for the database.
 */
PG_FUNCTION_INFO_V1(idem_stats);
Datum
idem_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[IDEM_NUM_STATS_COUNTERS + 1];
	bool		nulls[IDEM_NUM_STATS_COUNTERS + 1] = {false};

	IdemDatabaseStats *slot = require_database_slot();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_stats must return a composite type");
	if (desc->natts != IDEM_NUM_STATS_COUNTERS + 1)
		elog(ERROR, "idem_stats returns %d columns, the library has %d counters",
			 desc->natts, IDEM_NUM_STATS_COUNTERS + 1);

	for (int i = 0; i < IDEM_NUM_STATS_COUNTERS; i++)
		values[i] = Int64GetDatum((int64)
								  pg_atomic_read_u64(&slot->counters[i]));
	values[IDEM_NUM_STATS_COUNTERS] =
		TimestampTzGetDatum((TimestampTz) pg_atomic_read_u64(&slot->reset_at));

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
 *	  (those above the last bound included), of the current database.
 *	  Errors: 55000 library not preloaded, or no slot for the database.
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
	IdemDatabaseStats *slot = require_database_slot();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_wait_stats must return a composite type");

	for (int i = 0; i <= (int) WAIT_BUCKETS; i++)
	{
		count += pg_atomic_read_u64(&slot->wait_buckets[i]);
		if (i < (int) WAIT_BUCKETS)
		{
			bounds[i] = Float8GetDatum(wait_bounds_us[i] / 1000000.0);
			cumulative[i] = Int64GetDatum((int64) count);
		}
	}
	values[0] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->outcome_waits));
	values[1] = PointerGetDatum(construct_array(bounds, WAIT_BUCKETS, FLOAT8OID,
												sizeof(float8), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[2] = PointerGetDatum(construct_array(cumulative, WAIT_BUCKETS, INT8OID,
												sizeof(int64), FLOAT8PASSBYVAL,
												TYPALIGN_DOUBLE));
	values[3] = Float8GetDatum(pg_atomic_read_u64(&slot->wait_us_sum) / 1000000.0);
	values[4] = Int64GetDatum((int64) count);

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

/*
 * idem_messaging_stats() RETURNS (outbox_enqueued bigint, outbox_sent
 *								   bigint, outbox_send_lag_seconds_sum
 *								   float8, inbox_duplicates bigint)
 *	  The messaging counters of the current database (from version 1.4; the
 *	  idempotency_stats view appends them): messages enqueued and marked
 *	  sent by committed transactions, the seconds from enqueue to mark of
 *	  those sent, and idem_once calls that answered false.  Errors: 55000
 *	  library not preloaded, or no slot for the database.
 */
PG_FUNCTION_INFO_V1(idem_messaging_stats);
Datum
idem_messaging_stats(PG_FUNCTION_ARGS)
{
	TupleDesc	desc;
	Datum		values[4];
	bool		nulls[4] = {false};
	IdemDatabaseStats *slot = require_database_slot();

	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_messaging_stats must return a composite type");
	values[0] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->counters[IDEM_COUNT_OUTBOX_ENQUEUED]));
	values[1] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->counters[IDEM_COUNT_OUTBOX_SENT]));
	values[2] = Float8GetDatum(pg_atomic_read_u64(&slot->counters[IDEM_COUNT_OUTBOX_SEND_LAG_US]) / 1000000.0);
	values[3] = Int64GetDatum((int64) pg_atomic_read_u64(&slot->counters[IDEM_COUNT_INBOX_DUPLICATES]));

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc),
													  values, nulls)));
}

/*
 * idem_stats_reset() RETURNS void
 *	  Set the current database's counters and wait histogram to zero, and
 *	  its stats_reset to now; other databases' are untouched.  Counters are
 *	  reset one by one: a call counted meanwhile may survive the reset.
 *	  Revoked from PUBLIC.  Errors: 55000 library not preloaded, or no
 *	  slot for the database.
 */
PG_FUNCTION_INFO_V1(idem_stats_reset);
Datum
idem_stats_reset(PG_FUNCTION_ARGS)
{
	slot_zero(require_database_slot(), GetCurrentTimestamp());
	PG_RETURN_VOID();
}
