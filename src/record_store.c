/*
 * record_store.c
 *	  The one interface to the idempotent_record table.  Every call has a
 *	  saved SPI plan (planned SQL that a distributed table can route); the
 *	  hot ones (read, claim insert, outcome, purge) take the direct
 *	  heap/index path of record_direct.c instead where it behaves the same,
 *	  and wait => false probes with a dirty snapshot.
 *
 * Every statement names the table, types and operators schema-qualified
 * (comparisons too: an operator = on idem_status in a schema ahead of ours
 * would otherwise win), so the caller's search_path cannot redirect them.
 * Every statement reads and writes the table itself (ONLY), never a table
 * that inherits from it: the primary key, which names a record, is unique
 * in the table alone.  Statements run with the caller's privileges and row
 * level security, or, in delegated mode, as the table's owner
 * (delegation.c).  On a Citus table every statement names the scope, so
 * Citus routes it to one shard; purge and the probe of wait => false take
 * the per-shard forms of citus.c.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "miscadmin.h"
#include "storage/lmgr.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/datum.h"
#include "utils/guc.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/resowner.h"
#include "utils/timestamp.h"

#include "citus.h"
#include "delegation.h"
#include "extension_relation.h"
#include "idempotency.h"
#include "message_text.h"
#include "record_direct.h"
#include "record_store.h"
#include "saved_plans.h"

const char *const idem_status_names[] = {"in_progress", "succeeded", "failed", "unknown"};

typedef enum StorePlanId
{
	PLAN_READ,
	PLAN_INSERT,
	PLAN_RECLAIM_EXPIRED,
	PLAN_TAKE_OVER,
	PLAN_SET_OUTCOME,
	PLAN_RELEASE,
	PLAN_CHECKPOINT,
	PLAN_EXTEND_LEASE,
	PLAN_LOOKUP,
	PLAN_PURGE,
	PLAN_LOCK_NOWAIT,
	PLAN_PURGE_SCOPES,
	PLAN_PURGE_SCOPE,
	PLAN_SHARD_OF,
	PLAN_SHARD_PROBE,
	PLAN_PENDING,
	NUM_PLANS
} StorePlanId;

#define EQ " OPERATOR(pg_catalog.=) "
#define LE " OPERATOR(pg_catalog.<=) "
#define STATUS(s) "'" s "'::%2$s.idem_status"
#define WHERE_ID " WHERE scope" EQ "$1 AND key" EQ "$2 "
/* a claim that has no outcome yet: the only kind a fence may still write */
#define OPEN_STATUS " AND status" EQ "ANY ('{in_progress,unknown}'::%2$s.idem_status[])"

/*
 * Expired at now: past expires_at (the claim's), not waiting for
 * reconciliation, not under a live lease, and, for a final outcome, past
 * its retention (expires_at - created_at) after it was recorded
 * (updated_at), compared with immutable operators (no timestamptz +
 * interval, which would add days in the session's TimeZone and which Citus
 * refuses in DML).  The same rule as record_expired() in idempotency.h;
 * claims reclaim such a record, lookups ignore it, purge deletes it.
 */
#define EXPIRED(now) \
	" (expires_at" LE now " AND status OPERATOR(pg_catalog.<>) " STATUS("unknown") \
	" AND (locked_until IS NULL OR locked_until" LE now ")" \
	" AND (status" EQ STATUS("in_progress") \
	" OR (expires_at OPERATOR(pg_catalog.-) created_at)" LE "(" now " OPERATOR(pg_catalog.-) updated_at)))"

/*
 * The expiry bucket of a time, as the index idempotent_record_expires_at_idx
 * has it (written the same way, so that the planner matches it): records
 * of one minute share one deduplicated B-tree entry.
 */
#define EXPIRY_BUCKET(t) \
	" pg_catalog.date_bin('00:01:00'::pg_catalog.\"interval\", " t ", '2000-01-01 00:00:00+00'::pg_catalog.timestamptz)"

/* %1$s is the qualified table, %2$s the schema */
static const SavedPlanDef plan_defs[NUM_PLANS] = {
	[PLAN_READ] = {
		"SELECT status::pg_catalog.text, fingerprint::pg_catalog.bytea,"
		" result::pg_catalog.jsonb, recovery_point::pg_catalog.text,"
		" fence::pg_catalog.int8, locked_until::pg_catalog.timestamptz,"
		" expires_at::pg_catalog.timestamptz, created_at::pg_catalog.timestamptz,"
		" updated_at::pg_catalog.timestamptz FROM ONLY %1$s" WHERE_ID,
		2, {TEXTOID, TEXTOID}
	},
	[PLAN_INSERT] = {
		"INSERT INTO %1$s (scope, key, status, fingerprint, fence, locked_until,"
		" created_at, updated_at, expires_at)"
		" VALUES ($1, $2, $7::pg_catalog.text::%2$s.idem_status, $3, 1, $6, $4, $4, $5)"
		" ON CONFLICT (scope, key) DO NOTHING",
		7, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TIMESTAMPTZOID, TEXTOID}
	},
	/* an expired record is a new record: everything but the key is reset */
	[PLAN_RECLAIM_EXPIRED] = {
		"UPDATE ONLY %1$s SET status = $8::pg_catalog.text::%2$s.idem_status,"
		" fingerprint = $3, result = NULL, recovery_point = NULL,"
		" fence = fence OPERATOR(pg_catalog.+) 1, locked_until = $7,"
		" created_at = $4, updated_at = $4, expires_at = $5" WHERE_ID
		" AND fence" EQ "$6 AND" EXPIRED("$4")
		" RETURNING fence::pg_catalog.int8",
		8, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TEXTOID}
	},
	/*
	 * An abandoned claim keeps its fingerprint and recovery point, and its
	 * status ($8, the new status, is unused: the parameters are those of
	 * PLAN_RECLAIM_EXPIRED, see store_reclaim).
	 */
	[PLAN_TAKE_OVER] = {
		"UPDATE ONLY %1$s SET fingerprint = COALESCE(fingerprint, $3),"
		" fence = fence OPERATOR(pg_catalog.+) 1, locked_until = $7,"
		" updated_at = $4, expires_at = $5" WHERE_ID
		" AND fence" EQ "$6 AND status" EQ STATUS("in_progress")
		" AND (locked_until IS NULL OR locked_until" LE "$4)"
		" RETURNING fence::pg_catalog.int8",
		8, {TEXTOID, TEXTOID, BYTEAOID, TIMESTAMPTZOID, TIMESTAMPTZOID, INT8OID, TIMESTAMPTZOID, TEXTOID}
	},
	/*
	 * A final outcome leaves expires_at (indexed) as the claim set it, so
	 * that the update is HOT: it is kept at least its retention after
	 * updated_at (EXPIRED() above).  An unknown outcome, which a retryable
	 * failure may turn back into a claim in progress, moves expires_at to
	 * the end of that retention ($7 is the last valid timestamp), so that
	 * the record is kept as long after the release: record_kept_until of
	 * the outcome, with immutable operators (no timestamptz + interval,
	 * which would add days in the session's TimeZone).
	 */
	[PLAN_SET_OUTCOME] = {
		"UPDATE ONLY %1$s SET status = $4::pg_catalog.text::%2$s.idem_status,"
		" result = $5, locked_until = NULL, updated_at = $6,"
		" expires_at = CASE WHEN $4" EQ "'unknown' THEN GREATEST(expires_at, CASE"
		" WHEN (expires_at OPERATOR(pg_catalog.-) created_at) OPERATOR(pg_catalog.<) ($7 OPERATOR(pg_catalog.-) $6)"
		" THEN pg_catalog.timezone('UTC', pg_catalog.timezone('UTC', $6)"
		" OPERATOR(pg_catalog.+) (expires_at OPERATOR(pg_catalog.-) created_at))"
		" ELSE $7 END) ELSE expires_at END" WHERE_ID
		" AND fence" EQ "$3" OPEN_STATUS,
		7, {TEXTOID, TEXTOID, INT8OID, TEXTOID, JSONBOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	/*
	 * A released key keeps its record, as a claim whose lease ended at $4:
	 * the next claim takes it over with fence + 1, so the fence of the
	 * released claim can never write again (fences only grow while a
	 * record lives).  The reason of the failure ($5) stays in result for
	 * lookups, idem_pending and the retry that takes the key over, until
	 * the next outcome replaces it.
	 */
	[PLAN_RELEASE] = {
		"UPDATE ONLY %1$s SET status = " STATUS("in_progress") ", result = $5,"
		" locked_until = $4, updated_at = $4" WHERE_ID
		" AND fence" EQ "$3" OPEN_STATUS,
		5, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, JSONBOID}
	},
	[PLAN_CHECKPOINT] = {
		"UPDATE ONLY %1$s SET recovery_point = $4, updated_at = $5" WHERE_ID
		" AND fence" EQ "$3 AND status" EQ STATUS("in_progress"),
		5, {TEXTOID, TEXTOID, INT8OID, TEXTOID, TIMESTAMPTZOID}
	},
	[PLAN_EXTEND_LEASE] = {
		"UPDATE ONLY %1$s SET locked_until = $4, updated_at = $5" WHERE_ID
		" AND fence" EQ "$3 AND status" EQ STATUS("in_progress")
		" AND locked_until IS NOT NULL",
		5, {TEXTOID, TEXTOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	/* the table's own row type: the result of idem_lookup */
	[PLAN_LOOKUP] = {
		"SELECT ROW(r.*)::%1$s FROM ONLY %1$s AS r" WHERE_ID " AND NOT" EXPIRED("$3"),
		3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
	},
	/*
	 * One batch of expired records, oldest expiry bucket first: the walk of
	 * the index on EXPIRY_BUCKET stops at the batch's end (ORDER BY keeps the
	 * planner from a sequential scan past live records), and EXPIRED checks
	 * each row.  SKIP LOCKED: a record that a claim is reclaiming right now
	 * is left to it, and purge never waits for a claim.  The DELETE takes
	 * the row versions the batch has locked (and found expired, in their
	 * newest version) by address, a TID scan without a primary-key descent;
	 * a version the statement's snapshot does not see (updated after it) is
	 * left for the next purge.  The batch is a MATERIALIZED CTE, run once
	 * whatever the plan, so that the LIMIT bounds the batch.
	 */
	[PLAN_PURGE] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT ctid FROM ONLY %1$s WHERE" EXPIRY_BUCKET("expires_at") LE EXPIRY_BUCKET("$1")
		" AND" EXPIRED("$1")
		" ORDER BY" EXPIRY_BUCKET("expires_at") " LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM ONLY %1$s"
		" WHERE ctid OPERATOR(pg_catalog.=) ANY (ARRAY(SELECT ctid FROM batch))",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	/* wait => false, before a reclaim or takeover: 55P03 if anyone holds it */
	[PLAN_LOCK_NOWAIT] = {
		"SELECT FROM ONLY %1$s" WHERE_ID "FOR UPDATE NOWAIT",
		2, {TEXTOID, TEXTOID}
	},

	/*
	 * Purge of a Citus table, which Citus can neither lock nor limit across
	 * shards: the scopes with expired records, those that expired first
	 * first (a query Citus runs on every shard and merges, taking no row
	 * lock), then PLAN_PURGE in each scope ($3), which Citus routes to the
	 * scope's shard.
	 */
	[PLAN_PURGE_SCOPES] = {
		"SELECT scope FROM ONLY %1$s WHERE" EXPIRED("$1")
		" GROUP BY scope ORDER BY pg_catalog.min(expires_at), scope LIMIT $2",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	[PLAN_PURGE_SCOPE] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT key FROM ONLY %1$s WHERE scope" EQ "$3 AND" EXPIRED("$1")
		" ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM ONLY %1$s AS r USING batch"
		" WHERE r.scope" EQ "$3 AND r.key" EQ "batch.key",
		3, {TIMESTAMPTZOID, INT4OID, TEXTOID}
	},

	/*
	 * wait => false on a Citus table: the shard of scope $1 (metadata of
	 * this node), then idem_shard_probe run where that shard is (HAVING
	 * makes the one row that carries it, whatever the shard holds).
	 */
	[PLAN_SHARD_OF] = {
		"SELECT pg_catalog.get_shard_id_for_distribution_column($3, $1)",
		3, {TEXTOID, TEXTOID, REGCLASSOID}
	},
	[PLAN_SHARD_PROBE] = {
		"SELECT %2$s.idem_shard_probe($3, $1, $2) FROM ONLY %1$s" WHERE_ID
		"HAVING true",
		3, {TEXTOID, TEXTOID, INT8OID}
	},
	/*
	 * The rows of idem_pending at $1, unordered (on a Citus table a query
	 * of every shard; the view sorts the merged rows)
	 */
	[PLAN_PENDING] = {
		"SELECT scope, key, status, fence, recovery_point, result,"
		" locked_until, created_at, updated_at, expires_at FROM ONLY %1$s"
		" WHERE status" EQ STATUS("unknown")
		" OR (status" EQ STATUS("in_progress")
		" AND COALESCE(locked_until, created_at)" LE "$1)",
		1, {TIMESTAMPTZOID}
	},
};

static SPIPlanPtr plans[NUM_PLANS];
static SavedPlans store_plans = SAVED_PLANS_INIT("idempotent_record", plan_defs, plans);

/*
 * State of the innermost idem_store_begin .. idem_store_end bracket, and of the
 * brackets it is nested in: a trigger or constraint may call the extension
 * while the store runs a statement.  A bracket that an error left is
 * dropped when its (sub)transaction aborts.
 */
typedef enum WriteBlocked
{
	WRITE_NOT_BLOCKED,
	WRITE_RECORD_LOCKED,		/* another transaction holds the record */
	WRITE_TIMED_OUT				/* an insert met a lock, maybe not the key's */
} WriteBlocked;

typedef struct StoreBracket
{
	Oid			namespace;		/* the extension's schema */
	MemoryContext caller_context;	/* where values are copied out to */
	bool		nowait;			/* claim writes must not wait */
	WriteBlocked write_blocked; /* ... and the last one would have */
	bool		spi_connected;	/* SPI is connected on first use */
	IdemActor	actor;			/* invoker or delegated (delegation.c) */
} StoreBracket;

#define MAX_NESTED_BRACKETS 16

static StoreBracket cur;
static struct
{
	StoreBracket enclosing;		/* state to restore at idem_store_end */
	int			nest_level;		/* transaction nesting level at idem_store_begin */
}			nested[MAX_NESTED_BRACKETS];
static int	n_nested = 0;

static Oid	store_relid(void);
static bool store_citus(void);

static void
spi_ready(void)
{
	if (cur.spi_connected)
		return;
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	cur.spi_connected = true;
}

static int
store_exec(StorePlanId id, Datum *values, const char *nulls, int expected)
{
	spi_ready();
	return (int) idem_saved_plan_exec(&store_plans, id, cur.namespace, values,
									  nulls, expected);
}

/*
 * In the PG_CATCH of an internal subtransaction begun in context with
 * owner: roll it back and return the error that ended it (flushed, so the
 * caller may rethrow it or handle it), back in context and owner.
 */
ErrorData *
idem_store_subxact_error(MemoryContext context, ResourceOwner owner)
{
	ErrorData  *edata;

	MemoryContextSwitchTo(context);
	edata = CopyErrorData();
	FlushErrorState();
	RollbackAndReleaseCurrentSubTransaction();
	MemoryContextSwitchTo(context);
	CurrentResourceOwner = owner;
	return edata;
}

/*
 * A claim's write for wait => false, in a subtransaction, so that it
 * answers instead of waiting for another transaction's write of the key.
 * A reclaim or takeover first locks the record with FOR UPDATE NOWAIT:
 * any lock on it is the key's (WRITE_RECORD_LOCKED); once it is ours the
 * update waits for nothing but short internal locks.  An insert has no
 * record to lock: it runs with a 1 ms lock_timeout, and a timeout
 * (WRITE_TIMED_OUT) is either a duplicate inserted or deleted by a running
 * transaction since the probe, or a wait for something else, such as
 * another backend extending the table (idem_store_write_blocked_by_key tells
 * which).  The table's lock is taken first, with no timeout: DDL is not
 * the key.  Returns the rows processed, 0 when the write was refused.
 */
static int
store_exec_claim_write(StorePlanId id, Datum *values, const char *nulls,
					   int expected)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile int processed = 0;

	cur.write_blocked = WRITE_NOT_BLOCKED;
	if (!cur.nowait)
		return store_exec(id, values, nulls, expected);

	spi_ready();				/* outside the subtransaction it outlives */
	LockRelationOid(store_relid(), RowExclusiveLock);
	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		int			nestlevel = NewGUCNestLevel();

		if (id == PLAN_INSERT)
			(void) set_config_option("lock_timeout", "1", PGC_USERSET, PGC_S_SESSION,
									 GUC_ACTION_SAVE, true, 0, false);
		else
			(void) store_exec(PLAN_LOCK_NOWAIT, values, nulls, SPI_OK_SELECT);
		processed = store_exec(id, values, nulls, expected);
		AtEOXact_GUC(true, nestlevel);
		ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ErrorData  *edata = idem_store_subxact_error(context, owner);

		if (edata->sqlerrcode != ERRCODE_LOCK_NOT_AVAILABLE)
			ReThrowError(edata);
		FreeErrorData(edata);
		processed = 0;
		cur.write_blocked = id == PLAN_INSERT ? WRITE_TIMED_OUT : WRITE_RECORD_LOCKED;
	}
	PG_END_TRY();
	MemoryContextSwitchTo(context);
	CurrentResourceOwner = owner;
	return processed;
}

/*
 * An insert found a record that no read can see: row level security hides
 * it from this role but lets it insert.  Retrying would spin.
 */
void
idem_store_hidden_record_error(const IdemKey *id)
{
	ereport(ERROR,
			errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
			errmsg("idempotency record exists but is not visible to this role"),
			errdetail("Key \"%s\" in scope \"%s\" has a record that row level security hides from the current role.",
					  idem_message_value(id->key), idem_message_value(id->scope)),
			errhint("A policy on idempotent_record that hides a scope's records from a role must also refuse that role's inserts into the scope (WITH CHECK)."));
}

/* Did the last claim write return nothing because it would have waited? */
bool
idem_store_write_would_wait(void)
{
	return cur.write_blocked != WRITE_NOT_BLOCKED;
}

/*
 * The probe of idem_direct_probe_uncommitted as the table's owner (who sees
 * every row), for a caller it may not serve itself; the fingerprint found
 * is dropped.
 */
static DirectAnswer
probe_as_owner(const IdemKey *id)
{
	Oid			relid = store_relid();
	Oid			save_user;
	int			save_sec;
	bytea	   *fingerprint;
	DirectAnswer answer;

	idem_become_table_owner(relid, &save_user, &save_sec);
	answer = idem_direct_probe_uncommitted(relid, id, &fingerprint, cur.caller_context);
	SetUserIdAndSecContext(save_user, save_sec);
	return answer;
}

static void id_values(const IdemKey *id, Datum *values);

/*
 * idem_direct_probe_uncommitted for a Citus table, run where the shard of id's
 * scope is: Citus routes PLAN_SHARD_PROBE there, and idem_shard_probe
 * reads that shard with a dirty snapshot.  DIRECT_NOT_USED when the caller
 * may not read the shard directly.
 */
static DirectAnswer
citus_probe(const IdemKey *id, bytea **fingerprint)
{
	Datum		values[3];
	bool		isnull;
	Datum		d;
	ArrayType  *found;
	MemoryContext old;

	*fingerprint = NULL;
	id_values(id, values);
	values[2] = ObjectIdGetDatum(store_relid());
	(void) store_exec(PLAN_SHARD_OF, values, NULL, SPI_OK_SELECT);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		elog(ERROR, "Citus knows no shard of idempotent_record for scope \"%s\"", id->scope);
	values[2] = d;				/* int8, by value */
	if (store_exec(PLAN_SHARD_PROBE, values, NULL, SPI_OK_SELECT) != 1)
		elog(ERROR, "the probe of the shard of scope \"%s\" gave no answer", id->scope);
	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	if (isnull)
		return DIRECT_NOT_USED;
	found = DatumGetArrayTypeP(d);
	if (ARR_NDIM(found) == 0)
		return DIRECT_NONE;
	d = array_get_element(PointerGetDatum(found), 1, (int[]) {1}, -1, -1, false,
						  TYPALIGN_INT, &isnull);
	if (!isnull)
	{
		old = MemoryContextSwitchTo(cur.caller_context);
		*fingerprint = DatumGetByteaPCopy(d);
		MemoryContextSwitchTo(old);
	}
	return DIRECT_FOUND;
}

/* The look for another transaction writing id: here, or at its shard */
static DirectAnswer
store_probe(const IdemKey *id, bytea **fingerprint)
{
	if (store_citus())
		return citus_probe(id, fingerprint);
	return idem_direct_probe_uncommitted(store_relid(), id, fingerprint,
										 cur.caller_context);
}

/*
 * The last claim write would have waited (idem_store_write_would_wait): was it
 * for the key?  A lock on the record is.  An insert's lock timeout is when
 * another transaction, still running, is writing the key now (the probe
 * the claim began with, run again); otherwise it was a wait for something
 * else and the insert is tried again, as often as it takes.  The probe
 * runs as the caller, who then learns that transaction's fingerprint
 * (*fingerprint, else NULL), or else as the table's owner, answering only
 * yes or no: the insert has passed the caller's row level security checks
 * and was about to wait for that transaction, so the answer tells nothing
 * that the wait would not.  Where neither can probe (a table the probe
 * cannot read), the claim cannot tell, so its writes wait from now on, as
 * with wait => true.  A Citus table is probed where its shard is, as the
 * caller only (idem_shard_probe).
 */
bool
idem_store_write_blocked_by_key(const IdemKey *id, bytea **fingerprint)
{
	DirectAnswer answer;

	*fingerprint = NULL;
	if (cur.write_blocked == WRITE_RECORD_LOCKED)
		return true;
	answer = store_probe(id, fingerprint);
	if (answer == DIRECT_NOT_USED && !store_citus())
		answer = probe_as_owner(id);
	if (answer == DIRECT_NOT_USED)
		cur.nowait = false;
	return answer == DIRECT_FOUND;
}

/*
 * Open the store for one SQL-callable function.  The table is the one in
 * the schema of that function, which is the extension's schema.  With
 * nowait, the writes of a claim never wait for another transaction.  A
 * caller without any privilege on the table works in delegated mode: its
 * right to scope is checked first, then the table's owner does the work
 * (delegation.c); scope NULL for purge and idem_pending_at.
 */
void
idem_store_begin(Oid extension_function, bool nowait, const char *scope)
{
	if (n_nested == MAX_NESTED_BRACKETS)
		ereport(ERROR,
				errcode(ERRCODE_STATEMENT_TOO_COMPLEX),
				errmsg("idempotency functions are nested too deeply"),
				errdetail("A trigger or constraint on idempotent_record called the extension's functions %d levels deep.",
						  MAX_NESTED_BRACKETS));
	nested[n_nested].enclosing = cur;
	nested[n_nested].nest_level = GetCurrentTransactionNestLevel();
	n_nested++;
	cur.caller_context = CurrentMemoryContext;
	cur.nowait = nowait;
	cur.namespace = get_func_namespace(extension_function);
	cur.spi_connected = false;
	idem_actor_begin(&cur.actor, store_relid(), cur.namespace, scope);
}

/* Did the direct path answer?  Then *found is its answer. */
static bool
direct_answered(DirectAnswer answer, bool *found)
{
	*found = answer == DIRECT_FOUND;
	return answer != DIRECT_NOT_USED;
}

/*
 * The record table of the current bracket: looked up once per schema, again
 * after the table changes (relcache invalidation: dropped, renamed).  The
 * lookup reads catalogs, and a catalog read takes the invalidations other
 * sessions committed since the last one (AcceptInvalidationMessages): one
 * for the table, or a reset of all caches, may reach the callback while
 * the lookup runs.  So a call uses the OID it found, and the cache keeps
 * it only when no invalidation came meanwhile (it may be the table's
 * drop).  Returning the emptied cache handed OID 0 to the privilege check
 * ("relation with OID 0 does not exist").
 */
static Oid	table_namespace = InvalidOid;
static Oid	table_relid = InvalidOid;
static bool table_citus = false;	/* table_relid is a Citus table */
static uint64 table_invalidations = 0;

/* The table's OID; *citus (unless NULL): is it a Citus table? */
static Oid
store_table(bool *citus)
{
	uint64		invalidations = table_invalidations;
	Oid			relid;
	bool		is_citus;

	if (table_namespace == cur.namespace && OidIsValid(table_relid))
	{
		if (citus != NULL)
			*citus = table_citus;
		return table_relid;
	}
	relid = idem_extension_relation("idempotent_record", cur.namespace);
	is_citus = idem_citus_table(relid);
	if (invalidations == table_invalidations)
	{
		table_relid = relid;
		table_citus = is_citus;
		table_namespace = cur.namespace;
	}
	if (citus != NULL)
		*citus = is_citus;
	return relid;
}

static Oid
store_relid(void)
{
	return store_table(NULL);
}

/*
 * Is it a Citus table?  Then its rows are in shards that only planned SQL
 * reaches, routed by Citus (Citus invalidates the table's relcache entry
 * when it distributes it, and store_table looks again).
 */
static bool
store_citus(void)
{
	bool		citus;

	(void) store_table(&citus);
	return citus;
}

static void
store_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == table_relid)
		table_relid = InvalidOid;
	table_invalidations++;
}

void
idem_store_end(void)
{
	if (cur.spi_connected)
		SPI_finish();
	idem_actor_end(&cur.actor);
	cur = nested[--n_nested].enclosing;
}

/* Brackets begun in an aborted (sub)transaction were left by an error */
static void
store_subxact_callback(SubXactEvent event, SubTransactionId subid,
					   SubTransactionId parent, void *arg)
{
	int			level = GetCurrentTransactionNestLevel();

	if (event != SUBXACT_EVENT_ABORT_SUB)
		return;
	while (n_nested > 0 && nested[n_nested - 1].nest_level >= level)
		cur = nested[--n_nested].enclosing;
}

static void
store_xact_callback(XactEvent event, void *arg)
{
	if (event == XACT_EVENT_ABORT || event == XACT_EVENT_PARALLEL_ABORT)
	{
		n_nested = 0;
		memset(&cur, 0, sizeof(cur));
	}
}

void
idem_store_register_callbacks(void)
{
	RegisterXactCallback(store_xact_callback, NULL);
	CacheRegisterRelcacheCallback(store_relcache_callback, (Datum) 0);
	RegisterSubXactCallback(store_subxact_callback, NULL);
}

/*
 * Column attno of SPI row 0, copied into the caller's context (NULL if
 * null).  A varlena is detoasted as it is copied: a TOAST pointer, or a
 * value detoasted in SPI's memory, would not outlive idem_store_end.
 */
static Datum
column_copy(int attno, bool *isnull)
{
	Datum		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc,
								  attno, isnull);
	Form_pg_attribute att = TupleDescAttr(SPI_tuptable->tupdesc, attno - 1);
	MemoryContext old;

	if (*isnull)
		return (Datum) 0;
	old = MemoryContextSwitchTo(cur.caller_context);
	if (att->attlen == -1)
		d = PointerGetDatum(PG_DETOAST_DATUM_COPY(d));
	else
		d = datumCopy(d, att->attbyval, att->attlen);
	MemoryContextSwitchTo(old);
	return d;
}

/*
 * The IdemStatus of a status label read from the table; 22000 for a label
 * the extension does not know (a value added to idem_status), on either
 * path.
 */
IdemStatus
idem_status_from_name(const char *name)
{
	for (int i = 0; i < (int) lengthof(idem_status_names); i++)
		if (strcmp(name, idem_status_names[i]) == 0)
			return (IdemStatus) i;
	ereport(ERROR,
			errcode(ERRCODE_DATA_EXCEPTION),
			errmsg("idempotent_record has a record with unknown status \"%s\"", name),
			errdetail("The extension knows the statuses in_progress, succeeded, failed and unknown."),
			errhint("Store only the statuses the extension knows in idempotent_record."));
	return IDEM_UNKNOWN;		/* keep compiler quiet */
}

static void
id_values(const IdemKey *id, Datum *values)
{
	values[0] = CStringGetTextDatum(id->scope);
	values[1] = CStringGetTextDatum(id->key);
}

/*
 * The record of id as this statement's snapshot sees it (expired or not).
 * Returns false when there is none.
 */
bool
idem_store_read(const IdemKey *id, IdemRecord *rec)
{
	Datum		values[2];
	bool		isnull;
	Datum		d;
	bool		found;

	if (direct_answered(idem_direct_read(store_relid(), id, rec, cur.caller_context), &found))
		return found;

	id_values(id, values);
	if (store_exec(PLAN_READ, values, NULL, SPI_OK_SELECT) == 0)
		return false;

	d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
	rec->status = idem_status_from_name(TextDatumGetCString(d));
	d = column_copy(2, &isnull);
	rec->fingerprint = isnull ? NULL : DatumGetByteaPP(d);
	d = column_copy(3, &isnull);
	rec->result = isnull ? NULL : DatumGetJsonbP(d);
	d = column_copy(4, &isnull);
	rec->recovery_point = isnull ? NULL : MemoryContextStrdup(cur.caller_context, TextDatumGetCString(d));
	rec->fence = DatumGetInt64(column_copy(5, &isnull));
	rec->locked_until = DatumGetTimestampTz(column_copy(6, &isnull));
	rec->has_lease = !isnull;
	rec->expires_at = DatumGetTimestampTz(column_copy(7, &isnull));
	rec->created_at = DatumGetTimestampTz(column_copy(8, &isnull));
	rec->updated_at = DatumGetTimestampTz(column_copy(9, &isnull));
	return true;
}

/* The first parameters of every claim write: $1 .. $5 */
static void
claim_values(const IdemKey *id, bytea *fingerprint, const IdemClaimSpec *t,
			 Datum *values, char *nulls)
{
	id_values(id, values);
	values[2] = PointerGetDatum(fingerprint);
	if (fingerprint == NULL)
		nulls[2] = 'n';
	values[3] = TimestampTzGetDatum(t->now);
	values[4] = TimestampTzGetDatum(t->expires_at);
}

/* No row address known (row may be NULL) */
static void
forget_row_address(IdemRowAddress *row)
{
	if (row != NULL)
		row->relid = InvalidOid;
}

/*
 * Insert a new in-progress record with fence 1.  Like any INSERT into a
 * unique index it waits for an uncommitted duplicate; returns false when a
 * committed one exists (raises 40001 instead when that one is invisible to
 * a REPEATABLE READ or SERIALIZABLE snapshot).  With nowait (wait =>
 * false) it waits for nobody: the direct path's first attempt never waits,
 * and a duplicate it meets, or any where the direct path does not serve, is
 * looked for as an uncommitted write (false, idem_store_write_would_wait)
 * before the planned INSERT and its lock timeout.  *row (unless NULL) is
 * where the direct path wrote it, for the writes that follow the claim.
 */
bool
idem_store_insert(const IdemKey *id, bytea *fingerprint, const IdemClaimSpec *t,
				  IdemRowAddress *row)
{
	Datum		values[7];
	char		nulls[7] = "       ";
	bool		inserted;
	bytea	   *other_fingerprint;

	forget_row_address(row);
	cur.write_blocked = WRITE_NOT_BLOCKED;
	if (direct_answered(idem_direct_insert(store_relid(), id, fingerprint, t,
										   cur.nowait, row),
						&inserted))
		return inserted;

	/*
	 * wait => false: another transaction writing the key now (the look
	 * claim_attempt makes before judging a record it read) is refused at
	 * once, as the lock timeout below would refuse it a millisecond later
	 */
	if (cur.nowait && store_probe(id, &other_fingerprint) == DIRECT_FOUND)
	{
		cur.write_blocked = WRITE_TIMED_OUT;
		return false;
	}

	claim_values(id, fingerprint, t, values, nulls);
	values[5] = TimestampTzGetDatum(t->locked_until);
	if (!t->leased)
		nulls[5] = 'n';
	values[6] = CStringGetTextDatum(idem_status_names[t->status]);
	return store_exec_claim_write(PLAN_INSERT, values, nulls, SPI_OK_INSERT) == 1;
}

/* Shared by the two compare-and-set claims of an existing row */
static bool
store_reclaim(StorePlanId plan, const IdemKey *id, int64 seen_fence,
			  bytea *fingerprint, const IdemClaimSpec *t, int64 *new_fence)
{
	Datum		values[8];
	char		nulls[8] = "        ";
	bool		isnull;

	claim_values(id, fingerprint, t, values, nulls);
	values[5] = Int64GetDatum(seen_fence);
	values[6] = TimestampTzGetDatum(t->locked_until);
	if (!t->leased)
		nulls[6] = 'n';
	values[7] = CStringGetTextDatum(idem_status_names[t->status]);
	if (store_exec_claim_write(plan, values, nulls, SPI_OK_UPDATE_RETURNING) == 0)
		return false;
	*new_fence = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											 SPI_tuptable->tupdesc, 1, &isnull));
	return true;
}

/*
 * Claim an expired record again as if it were new (fence + 1).  Returns
 * false when another transaction changed or removed it since it was read
 * with seen_fence (after waiting for that transaction, as UPDATE does).
 */
bool
idem_store_reclaim_expired(const IdemKey *id, int64 seen_fence, bytea *fingerprint,
						   const IdemClaimSpec *t, int64 *new_fence)
{
	return store_reclaim(PLAN_RECLAIM_EXPIRED, id, seen_fence, fingerprint,
						 t, new_fence);
}

/*
 * Take over an in-progress record whose owner holds no live lease
 * (fence + 1, recovery point kept).  False as for idem_store_reclaim_expired.
 */
bool
idem_store_take_over(const IdemKey *id, int64 seen_fence, bytea *fingerprint,
					 const IdemClaimSpec *t, int64 *new_fence)
{
	return store_reclaim(PLAN_TAKE_OVER, id, seen_fence, fingerprint,
						 t, new_fence);
}

/*
 * The fenced writes below change the record only while fence is its
 * current fence and it has no final outcome; each returns false otherwise
 * (the caller then reads the record to say why).  row is the claim's row
 * address when this transaction holds the claim (else NULL): the direct
 * path may find the record there (idem_direct_fenced_update) and moves it
 * to the version it writes; a write through the SQL forgets it.
 */

/*
 * The direct path of a fenced write of the claim at row (or found by key);
 * true when it answered (*updated then says whether it wrote), false when
 * the SQL must run, which forgets the row address.
 */
static bool
direct_fenced_write(const IdemKey *id, int64 fence, const IdemFencedChange *change,
					IdemRowAddress *row, bool *updated)
{
	if (direct_answered(idem_direct_fenced_update(store_relid(), id, fence,
												  change, row), updated))
		return true;
	forget_row_address(row);
	return false;
}

/* Run a fenced write whose plan takes scope, key, fence and two values */
static bool
fenced_write(StorePlanId plan, const IdemKey *id, int64 fence, Datum value3,
			 Datum value4)
{
	Datum		values[5];

	id_values(id, values);
	values[2] = Int64GetDatum(fence);
	values[3] = value3;
	values[4] = value4;
	return store_exec(plan, values, NULL, SPI_OK_UPDATE) == 1;
}

/* Record an outcome (succeeded, failed or unknown) */
bool
idem_store_set_outcome(const IdemKey *id, int64 fence, IdemStatus status,
					   Jsonb *result, TimestampTz now, IdemRowAddress *row)
{
	IdemFencedChange change = {IDEM_CHANGE_OUTCOME, status, result, NULL, now};
	Datum		values[7];
	bool		updated;

	if (direct_fenced_write(id, fence, &change, row, &updated))
		return updated;
	id_values(id, values);
	values[2] = Int64GetDatum(fence);
	values[3] = CStringGetTextDatum(idem_status_names[status]);
	values[4] = JsonbPGetDatum(result);
	values[5] = TimestampTzGetDatum(now);
	values[6] = TimestampTzGetDatum(IDEM_LAST_TIMESTAMP);
	return store_exec(PLAN_SET_OUTCOME, values, NULL, SPI_OK_UPDATE) == 1;
}

/*
 * Release a key for a retry: the next claim takes it over.  reason (the
 * error of the failed attempt) is kept in result.
 */
bool
idem_store_release(const IdemKey *id, int64 fence, Jsonb *reason, TimestampTz now,
				   IdemRowAddress *row)
{
	IdemFencedChange change = {IDEM_CHANGE_RELEASE, IDEM_IN_PROGRESS, reason, NULL, now};
	bool		updated;

	if (direct_fenced_write(id, fence, &change, row, &updated))
		return updated;
	return fenced_write(PLAN_RELEASE, id, fence, TimestampTzGetDatum(now),
						JsonbPGetDatum(reason));
}

/* Save the recovery point of an in-progress claim */
bool
idem_store_checkpoint(const IdemKey *id, int64 fence, const char *recovery_point,
					  TimestampTz now, IdemRowAddress *row)
{
	IdemFencedChange change = {IDEM_CHANGE_CHECKPOINT, IDEM_IN_PROGRESS, NULL,
	recovery_point, now};
	bool		updated;

	if (direct_fenced_write(id, fence, &change, row, &updated))
		return updated;
	return fenced_write(PLAN_CHECKPOINT, id, fence,
						CStringGetTextDatum(recovery_point),
						TimestampTzGetDatum(now));
}

/* Move the lease end of a leased in-progress claim to locked_until */
bool
idem_store_extend_lease(const IdemKey *id, int64 fence, TimestampTz locked_until,
						TimestampTz now)
{
	return fenced_write(PLAN_EXTEND_LEASE, id, fence,
						TimestampTzGetDatum(locked_until),
						TimestampTzGetDatum(now));
}

/* Delete up to batch_size records expired at now; returns how many */
int64
idem_store_purge(TimestampTz now, int32 batch_size)
{
	Datum		values[2];
	int			nestlevel;
	int64		purged = idem_direct_purge(store_relid(), now, batch_size);

	if (purged != DIRECT_NOT_USED)
		return purged;
	if (store_citus())
	{
		spi_ready();
		return idem_purge_by_scope(&store_plans, PLAN_PURGE_SCOPES,
								   PLAN_PURGE_SCOPE, cur.namespace, now,
								   batch_size);
	}
	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch_size);

	/*
	 * Never a sequential scan: the planner costs one (and a sort) as if the
	 * expired records were spread evenly over the table, but they may be
	 * anywhere, and each batch would read every live record.  The walk of
	 * the index by the minute of expires_at stops at the batch's end.  The
	 * setting holds for the planning of this statement only.
	 */
	nestlevel = NewGUCNestLevel();
	(void) set_config_option("enable_seqscan", "off", PGC_USERSET, PGC_S_SESSION,
							 GUC_ACTION_SAVE, true, 0, false);
	purged = store_exec(PLAN_PURGE, values, NULL, SPI_OK_DELETE);
	AtEOXact_GUC(true, nestlevel);
	return purged;
}

/* The unexpired record of id as a heap tuple in the caller's context */
HeapTuple
idem_store_lookup(const IdemKey *id, TimestampTz now)
{
	Datum		values[3];
	MemoryContext old;
	HeapTupleData row;
	HeapTuple	tuple;
	bool		isnull;

	id_values(id, values);
	values[2] = TimestampTzGetDatum(now);
	if (store_exec(PLAN_LOOKUP, values, NULL, SPI_OK_SELECT) == 0)
		return NULL;
	/* a composite of the row type, dropped columns and all */
	row.t_data = DatumGetHeapTupleHeader(SPI_getbinval(SPI_tuptable->vals[0],
													   SPI_tuptable->tupdesc, 1,
													   &isnull));
	row.t_len = HeapTupleHeaderGetDatumLength(row.t_data);
	ItemPointerSetInvalid(&row.t_self);
	row.t_tableOid = InvalidOid;
	old = MemoryContextSwitchTo(cur.caller_context);
	tuple = heap_copytuple(&row);
	MemoryContextSwitchTo(old);
	return tuple;
}

/*
 * The rows of idem_pending at at, into rsinfo's tuplestore (its tuple
 * descriptor has the columns of PLAN_PENDING, in order); in delegated mode
 * only those of scopes the caller was granted.
 */
void
idem_store_pending(TimestampTz at, Tuplestorestate *rows)
{
	Datum		values[1];
	uint64		n;

	values[0] = TimestampTzGetDatum(at);
	n = store_exec(PLAN_PENDING, values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < n; i++)
	{
		HeapTuple	row = SPI_tuptable->vals[i];

		if (cur.actor.delegated)
		{
			char	   *scope = SPI_getvalue(row, SPI_tuptable->tupdesc, 1);

			if (!idem_scope_is_permitted(cur.actor.caller, cur.namespace, scope))
				continue;
		}
		tuplestore_puttuple(rows, row);
	}
}

/*
 * Is another transaction, still in progress, writing the record of id?  See
 * idem_direct_probe_uncommitted (and citus_probe); callers it may not probe get
 * false.
 */
bool
idem_store_probe_uncommitted(const IdemKey *id, bytea **fingerprint)
{
	return store_probe(id, fingerprint) == DIRECT_FOUND;
}
