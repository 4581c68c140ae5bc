/*
 * claim.c
 *	  idem_claim, in both modes (in-transaction and leased), and idem_lookup.
 *
 * Semantics follow docs/concepts.md ("Outcomes") and the IETF
 * Idempotency-Key draft: the first request with a key does the work, every
 * duplicate gets the first outcome.
 * Concurrency is left to the primary key, as with INSERT ... ON CONFLICT: a
 * duplicate waits for an uncommitted claim and then replays or claims.
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "access/xact.h"
#include "catalog/pg_type.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/syscache.h"
#include "utils/timestamp.h"
#include "utils/typcache.h"

#include "args.h"
#include "citus.h"
#include "extension_relation.h"
#include "idempotency.h"
#include "message_text.h"
#include "outcome_wait.h"
#include "record_store.h"
#include "stats.h"
#include "xact_claims.h"

/* Argument numbers of idem_claim */
enum
{
	CLAIM_KEY, CLAIM_SCOPE, CLAIM_FINGERPRINT, CLAIM_TTL, CLAIM_WAIT, CLAIM_LEASE,
	CLAIM_WAIT_FOR_OUTCOME		/* from version 1.1 of the SQL objects */
};

static void
check_fingerprint(const IdemKey *id, bytea *stored, bytea *given)
{
	if (stored == NULL || given == NULL)
		return;
	if (VARSIZE_ANY_EXHDR(stored) == VARSIZE_ANY_EXHDR(given) &&
		memcmp(VARDATA_ANY(stored), VARDATA_ANY(given), VARSIZE_ANY_EXHDR(given)) == 0)
		return;
	idem_count(IDEM_COUNT_FINGERPRINT_MISMATCHES);
	ereport(ERROR,
			errcode(ERRCODE_IDEM_FINGERPRINT_MISMATCH),
			errmsg("idempotency key was already used for a different request"),
			errdetail("Key \"%s\" in scope \"%s\" is held by a request with fingerprint %s; this request has fingerprint %s.",
					  idem_message_value(id->key), idem_message_value(id->scope),
					  idem_message_value(DatumGetCString(DirectFunctionCall1(byteaout, PointerGetDatum(stored)))),
					  idem_message_value(DatumGetCString(DirectFunctionCall1(byteaout, PointerGetDatum(given))))),
			errhint("Use a new idempotency key for a new request."));
}

/*
 * The times of one claim attempt, from one reading of the server clock:
 * expires_at = now + ttl (or idempotency.default_ttl), and with a lease
 * locked_until = now + lease.
 */
static void
claim_times(FunctionCallInfo fcinfo, IdemClaimSpec *t)
{
	t->status = IDEM_IN_PROGRESS;
	t->now = GetCurrentTimestamp();
	t->expires_at = idem_ttl_end(fcinfo, CLAIM_TTL, t->now);
	t->leased = !PG_ARGISNULL(CLAIM_LEASE);
	t->locked_until = t->leased ?
		idem_interval_end(fcinfo, CLAIM_LEASE, "lease", t->now) : 0;
}

/*
 * A leased claim must commit on its own, before the work it guards starts.
 * In a transaction block (BEGIN, or several statements in one query
 * string), a subtransaction or a pipeline it would roll back with the work
 * around it after the caller was told "claimed": refuse it there, as
 * PreventInTransactionBlock refuses VACUUM, and commit right after the
 * statement otherwise (a later message of a pipeline cannot join it).
 * Unlike PreventInTransactionBlock this allows a function or procedure
 * that runs as a statement of its own: in a procedure's non-atomic context
 * each transaction it starts is not a transaction block either.
 */
static void
require_own_transaction(const IdemKey *id)
{
	if (IsTransactionBlock() || IsSubTransaction() ||
		(MyXactFlags & XACT_FLAGS_PIPELINING))
		ereport(ERROR,
				errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				errmsg("leased claim cannot run inside a transaction block"),
				errdetail("Key \"%s\" in scope \"%s\" would be claimed in a transaction block, a subtransaction or a pipeline, where the claim could roll back after the caller was told \"claimed\".",
						  idem_message_value(id->key), idem_message_value(id->scope)),
				errhint("Call idem_claim with a lease as a statement of its own in autocommit mode, or make an in-transaction claim without a lease."));
	MyXactFlags |= XACT_FLAGS_NEEDIMMEDIATECOMMIT;
}

typedef enum ClaimOutcome
{
	OUTCOME_CLAIMED,
	OUTCOME_REPLAY,
	OUTCOME_IN_PROGRESS
} ClaimOutcome;

static const char *const outcome_names[] = {"claimed", "replay", "in_progress"};

/* What idem_claim returns; NULL pointers and has_* false become NULLs */
typedef struct ClaimAnswer
{
	ClaimOutcome outcome;
	bool		has_record;		/* status and fence known */
	IdemStatus	status;
	Jsonb	   *result;
	int64		fence;
	char	   *recovery_point;
	Interval   *retry_after;
	bool		awaits_outcome; /* a committed holder will record one */
	TimestampTz lease_end;		/* when awaits_outcome: end of its lease, or
								 * DT_NOEND */
} ClaimAnswer;

static bool
answer_from_record(ClaimAnswer *a, ClaimOutcome outcome, const IdemRecord *rec)
{
	a->outcome = outcome;
	a->has_record = true;
	a->status = rec->status;
	a->result = rec->result;
	a->fence = rec->fence;
	a->recovery_point = rec->recovery_point;
	a->retry_after = NULL;
	a->awaits_outcome = false;
	return true;
}

/*
 * A new claim: register it with the commit guard unless it is leased.  A
 * takeover answers with what the record keeps: the recovery point, and
 * the error of a retryable failure in result.
 */
static bool
answer_claimed(ClaimAnswer *a, const IdemKey *id, const IdemClaimSpec *t,
			   int64 fence, char *recovery_point, Jsonb *result,
			   const IdemRowAddress *row)
{
	a->outcome = OUTCOME_CLAIMED;
	a->has_record = true;
	a->status = IDEM_IN_PROGRESS;
	a->result = result;
	a->fence = fence;
	a->recovery_point = recovery_point;
	a->retry_after = NULL;
	a->awaits_outcome = false;
	if (!t->leased)
		idem_claims_add(id, fence, row);
	return true;
}

/*
 * in_progress because another transaction is writing the record (wait =>
 * false): its status and fence are not visible yet.  If that transaction
 * records an outcome, its commit wakes a claim waiting for one.
 */
static bool
answer_in_progress(ClaimAnswer *a)
{
	memset(a, 0, sizeof(*a));
	a->outcome = OUTCOME_IN_PROGRESS;
	a->awaits_outcome = true;
	a->lease_end = DT_NOEND;
	return true;
}

/*
 * Is another transaction writing the record of id right now?  If so, its
 * uncommitted record's fingerprint must match.
 */
static bool
busy_elsewhere(const IdemKey *id, bytea *fingerprint)
{
	bytea	   *other_fingerprint;

	if (!idem_store_probe_uncommitted(id, &other_fingerprint))
		return false;
	check_fingerprint(id, other_fingerprint, fingerprint);
	return true;
}

/* State of one idem_claim call across its attempts */
typedef struct ClaimLoop
{
	bool		wait;
	int			hidden;			/* inserts refused by a record not visible */
} ClaimLoop;

/*
 * A claim write, in the attempt that started at attempt_start, changed
 * nothing.  Usually a concurrent transaction changed the record first:
 * return false to try again.  With wait => false it may
 * instead have refused to wait for a lock: answer in_progress when that
 * lock is the key's (another transaction holds or writes the record), and
 * try again when it was something else (another backend extending the
 * table): a key nobody else holds is always claimed.
 */
static bool
write_lost(const IdemKey *id, bytea *fingerprint, ClaimLoop *loop,
		   ClaimAnswer *a, TimestampTz attempt_start)
{
	bytea	   *other_fingerprint;

	/* a wait on the key, from the attempt's start (README "idempotency_stats") */
	if (loop->wait)
		idem_stats_wait_ended(IDEM_WAIT_KEY, attempt_start);
	if (loop->wait || !idem_store_write_would_wait() ||
		!idem_store_write_blocked_by_key(id, &other_fingerprint))
		return false;
	check_fingerprint(id, other_fingerprint, fingerprint);
	return answer_in_progress(a);
}

/*
 * One attempt to claim id.  Returns false when a concurrent transaction
 * changed the record between our read and our write; the caller tries
 * again with a new snapshot (READ COMMITTED), as EvalPlanQual would.
 */
static bool
claim_attempt(FunctionCallInfo fcinfo, const IdemKey *id, bytea *fingerprint,
			  ClaimLoop *loop, ClaimAnswer *a)
{
	IdemClaimSpec t;
	IdemRecord	rec;
	HeldClaim  *mine;
	int64		new_fence;
	IdemRowAddress row = {InvalidOid};

	claim_times(fcinfo, &t);

	/*
	 * No record to read: the insert of wait => false looks for another
	 * transaction writing the key only when it meets one (a new key, the
	 * usual case, costs no look); see idem_store_insert.
	 */
	if (!idem_store_read(id, &rec))
	{
		if (idem_store_insert(id, fingerprint, &t, &row))
			return answer_claimed(a, id, &t, 1, NULL, NULL, &row);
		if (!idem_store_write_would_wait() && ++loop->hidden >= 3)
			idem_store_hidden_record_error(id);
		return write_lost(id, fingerprint, loop, a, t.now);
	}

	/* a record that another transaction is writing is not ours to judge */
	if (!loop->wait && busy_elsewhere(id, fingerprint))
		return answer_in_progress(a);

	/*
	 * Our own open claim, made earlier in this transaction: the key is
	 * already ours, even if its ttl has run out meanwhile.
	 */
	mine = idem_claims_find(id);
	if (mine != NULL && mine->finished_in == InvalidSubTransactionId)
	{
		check_fingerprint(id, rec.fingerprint, fingerprint);
		return answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
	}

	/* an expired record counts as absent: no fingerprint check */
	if (record_expired(&rec, t.now))
	{
		if (!idem_store_reclaim_expired(id, rec.fence, fingerprint, &t, &new_fence))
			return write_lost(id, fingerprint, loop, a, t.now);
		return answer_claimed(a, id, &t, new_fence, NULL, NULL, &row);
	}

	check_fingerprint(id, rec.fingerprint, fingerprint);

	switch (rec.status)
	{
		case IDEM_SUCCEEDED:
		case IDEM_FAILED:
			return answer_from_record(a, OUTCOME_REPLAY, &rec);
		case IDEM_UNKNOWN:
			/* waits for a reconciler to record the outcome */
			answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
			a->awaits_outcome = true;
			a->lease_end = DT_NOEND;
			return true;
		case IDEM_IN_PROGRESS:
			break;
	}

	if (rec.has_lease && rec.locked_until > t.now)
	{
		answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
		a->awaits_outcome = true;
		a->lease_end = rec.locked_until;
		/* the lease time left when that is short, else the hint */
		if (rec.locked_until - t.now < (int64) idem_retry_after * 1000)
			a->retry_after = DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
																   TimestampTzGetDatum(rec.locked_until),
																   TimestampTzGetDatum(t.now)));
		return true;
	}

	/* committed in progress without a live lease: the owner is gone */
	if (!idem_store_take_over(id, rec.fence, fingerprint, &t, &new_fence))
		return write_lost(id, fingerprint, loop, a, t.now);
	idem_count(IDEM_COUNT_TAKEOVERS);
	return answer_claimed(a, id, &t, new_fence, rec.recovery_point,
						  rec.result, &row);
}

/*
 * What idem_claim builds its result row with: the blessed row type and the
 * values of its idem_status column.  Kept for the backend's life, not per
 * statement (fn_extra): building them costs catalog lookups that a replay
 * would otherwise pay on every call.  Any change to a function, type or
 * enum label drops it (an extension update may change the row type, or the
 * schema the type is in), and so does any change to the row type's
 * columns (ALTER TYPE ... ATTRIBUTE), which gives the type cache's row
 * descriptor a new identifier (checked per call: a hash lookup; a relcache
 * callback of our own could run out of slots beside Citus's).
 * The columns must be of the types idem_claim fills them with.
 */
typedef struct ClaimResultType
{
	Oid			fn_oid;			/* InvalidOid: not built */
	Oid			typid;			/* the row type */
	uint64		tupdesc_id;		/* its type cache descriptor's identifier */
	TupleDesc	desc;
	Datum		status[IDEM_UNKNOWN + 1];
} ClaimResultType;

static ClaimResultType result_type;
static MemoryContext result_type_context = NULL;

static void
result_type_invalidate(Datum arg, int cacheid, uint32 hashvalue)
{
	result_type.fn_oid = InvalidOid;
}

/* The types of idem_claim_result's columns, in order (status: any enum) */
static const Oid result_column_types[] = {
	TEXTOID, InvalidOid, JSONBOID, INT8OID, TEXTOID, INTERVALOID
};

static void
check_result_columns(TupleDesc desc)
{
	bool		ok = desc->natts == (int) lengthof(result_column_types);

	for (int i = 0; ok && i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);

		ok = !att->attisdropped &&
			(OidIsValid(result_column_types[i]) ?
			 att->atttypid == result_column_types[i] : type_is_enum(att->atttypid));
	}
	if (!ok)
		ereport(ERROR,
				(errcode(ERRCODE_DATATYPE_MISMATCH),
				 errmsg("idem_claim's result type does not have the columns the extension installed"),
				 errhint("Recreate the extension, or restore type idem_claim_result as it was created.")));
}

static const ClaimResultType *
claim_result_type(FunctionCallInfo fcinfo)
{
	TupleDesc	desc;
	MemoryContext old;

	if (result_type.fn_oid == fcinfo->flinfo->fn_oid &&
		lookup_type_cache(result_type.typid, TYPECACHE_TUPDESC)->tupDesc_identifier ==
		result_type.tupdesc_id)
		return &result_type;
	if (result_type_context == NULL)
	{
		result_type_context = AllocSetContextCreate(CacheMemoryContext,
													"idem_claim result type",
													ALLOCSET_SMALL_SIZES);
		CacheRegisterSyscacheCallback(PROCOID, result_type_invalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(TYPEOID, result_type_invalidate, (Datum) 0);
		CacheRegisterSyscacheCallback(ENUMOID, result_type_invalidate, (Datum) 0);
	}
	result_type.fn_oid = InvalidOid;
	MemoryContextReset(result_type_context);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_claim must return a composite type");
	check_result_columns(desc);
	result_type.typid = desc->tdtypeid;
	result_type.tupdesc_id =
		lookup_type_cache(desc->tdtypeid, TYPECACHE_TUPDESC)->tupDesc_identifier;
	old = MemoryContextSwitchTo(result_type_context);
	result_type.desc = BlessTupleDesc(CreateTupleDescCopy(desc));
	for (int i = 0; i <= (int) IDEM_UNKNOWN; i++)
		result_type.status[i] = DirectFunctionCall2(enum_in,
													CStringGetDatum(idem_status_names[i]),
													ObjectIdGetDatum(TupleDescAttr(desc, 1)->atttypid));
	MemoryContextSwitchTo(old);
	result_type.fn_oid = fcinfo->flinfo->fn_oid;
	return &result_type;
}

/* Attempts until one answers: claimed, replay or in_progress */
static void
claim_answer(FunctionCallInfo fcinfo, const IdemKey *id, bytea *fingerprint,
			 ClaimLoop *loop, ClaimAnswer *a)
{
	idem_store_begin(fcinfo->flinfo->fn_oid, !loop->wait, id->scope);
	while (!claim_attempt(fcinfo, id, fingerprint, loop, a))
		CHECK_FOR_INTERRUPTS();
	idem_store_end();
}

/*
 * wait_for_outcome: a waiter must hold no lock while it sleeps, or the
 * transaction it waits for could wait for it, unseen by the deadlock
 * detector.  It may not start in a transaction that has written or locked
 * rows (it has a transaction id), nor under a transaction snapshot, which
 * could never see the outcome it waits for.
 */
static void
require_waitable_transaction(const IdemKey *id)
{
	if (TransactionIdIsValid(GetTopTransactionIdIfAny()))
		ereport(ERROR,
				errcode(ERRCODE_ACTIVE_SQL_TRANSACTION),
				errmsg("wait_for_outcome cannot wait in a transaction that has written or locked rows"),
				errdetail("Key \"%s\" in scope \"%s\": while waiting, this transaction's locks could block the outcome it waits for, and no deadlock would be detected.",
						  idem_message_value(id->key), idem_message_value(id->scope)),
				errhint("Claim with wait_for_outcome before the transaction's first write, or as a statement of its own."));
	if (IsolationUsesXactSnapshot())
		ereport(ERROR,
				errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				errmsg("wait_for_outcome cannot wait under REPEATABLE READ or SERIALIZABLE"),
				errdetail("Key \"%s\" in scope \"%s\": the transaction's snapshot could never see the outcome it waits for.",
						  idem_message_value(id->key), idem_message_value(id->scope)),
				errhint("Claim with wait_for_outcome in a READ COMMITTED transaction, or retry after retry_after."));
}

/*
 * One answer of a claim that may wait, in a subtransaction: rolled back
 * when the answer is to sleep on, so that no lock taken on the way (a
 * takeover that lost to another locks the record's newest version) is held
 * while sleeping; kept otherwise.  Returns whether to sleep.
 */
static bool
claim_answer_or_sleep(FunctionCallInfo fcinfo, const IdemKey *id,
					  bytea *fingerprint, ClaimLoop *loop, ClaimAnswer *a,
					  TimestampTz wait_end)
{
	MemoryContext context = CurrentMemoryContext;
	ResourceOwner owner = CurrentResourceOwner;
	volatile bool sleeps = false;

	BeginInternalSubTransaction(NULL);
	MemoryContextSwitchTo(context);
	PG_TRY();
	{
		claim_answer(fcinfo, id, fingerprint, loop, a);
		sleeps = a->awaits_outcome && GetCurrentTimestamp() < wait_end;
		if (sleeps)
			RollbackAndReleaseCurrentSubTransaction();
		else
			ReleaseCurrentSubTransaction();
	}
	PG_CATCH();
	{
		ReThrowError(idem_store_subxact_error(context, owner));
	}
	PG_END_TRY();
	MemoryContextSwitchTo(context);
	CurrentResourceOwner = owner;
	return sleeps;
}

/*
 * On a Citus table the outcome may be recorded through another node, whose
 * commit wakes only the waiters of that node: a waiter reads its record
 * again at least this often.
 */
#define CITUS_WAIT_RECHECK_MS 100

/* The end of one sleep of a waiter that waits until until */
static TimestampTz
wait_round_end(TimestampTz until, bool citus)
{
	if (!citus)
		return until;
	return Min(until, TimestampTzPlusMilliseconds(GetCurrentTimestamp(),
												  CITUS_WAIT_RECHECK_MS));
}

/*
 * The answers of a claim with wait_for_outcome, which started at start,
 * sleeping between them: woken by a commit of an outcome, at the lease's
 * end, or the bound (start + wait_for_outcome).  A claim that slept is one
 * wait on an outcome, timed from start, as its bound is, to its answer or
 * its error (a cancel while it sleeps is a wait too): one that answers at
 * its bound waited at least wait_for_outcome.
 */
static void
claim_waiting_for_outcome(FunctionCallInfo fcinfo, const IdemKey *id,
						  bytea *fingerprint, ClaimLoop *loop, ClaimAnswer *a,
						  TimestampTz start, TimestampTz wait_end)
{
	volatile bool slept = false;
	bool		citus = idem_citus_table(idem_extension_relation("idempotent_record",
																 get_func_namespace(fcinfo->flinfo->fn_oid)));

	PG_TRY();
	{
		for (;;)
		{
			uint64		generation = idem_outcome_wait_generation(id);

			if (!claim_answer_or_sleep(fcinfo, id, fingerprint, loop, a,
									   wait_end))
				break;
			slept = true;
			idem_outcome_wait_sleep(id, generation,
									wait_round_end(Min(wait_end, a->lease_end), citus));
		}
	}
	PG_CATCH();
	{
		if (slept)
			idem_stats_wait_ended(IDEM_WAIT_OUTCOME, start);
		PG_RE_THROW();
	}
	PG_END_TRY();
	if (slept)
		idem_stats_wait_ended(IDEM_WAIT_OUTCOME, start);
}

/*
 * idem_claim(key text, scope text, fingerprint bytea, ttl interval,
 *			  wait boolean, lease interval, wait_for_outcome interval)
 *			  RETURNS (outcome, status, result, fence, recovery_point,
 *			  retry_after)
 *	  Claim (scope, key), or learn what to replay.  Without a lease the
 *	  claim belongs to the caller's transaction (commit guard); with one it
 *	  commits on its own and holds the key until locked_until.  result:
 *	  what a replay answers, and for a takeover or in_progress the last
 *	  retryable error (or unknown detail) the record keeps.  retry_after
 *	  of an in_progress answer: the lease time left when shorter than
 *	  idempotency.retry_after (ms), else that.  wait_for_outcome (from
 *	  version 1.1; NULL: none) lets a claim of a key held by a live lease or
 *	  awaiting reconciliation wait that long for the outcome
 *	  (outcome_wait.c).  ttl, lease and wait_for_outcome are fixed
 *	  durations (idem_interval_end).  Errors: IK001 fingerprint mismatch, 25001
 *	  leased claim inside a transaction block, subtransaction or pipeline,
 *	  or wait_for_outcome in a transaction that has written or locked rows,
 *	  0A000 wait_for_outcome under a transaction snapshot, 22004 NULL key,
 *	  scope or wait, 22023 empty/over-long key or scope, non-positive ttl,
 *	  lease or wait_for_outcome, 22008 one of them too long, 55000
 *	  wait_for_outcome without the library preloaded, 25006 read-only
 *	  transaction or standby, 57014 canceled while waiting; 40001 and 40P01
 *	  come from the unique index as for INSERT ... ON CONFLICT.
 */
PG_FUNCTION_INFO_V1(idem_claim);
Datum
idem_claim(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, CLAIM_KEY, CLAIM_SCOPE, "idem_claim");
	bytea	   *fingerprint = PG_ARGISNULL(CLAIM_FINGERPRINT) ? NULL :
		PG_GETARG_BYTEA_PP(CLAIM_FINGERPRINT);
	ClaimLoop	loop = {0};
	ClaimAnswer a;
	IdemClaimSpec t;
	bool		waits = PG_NARGS() > CLAIM_WAIT_FOR_OUTCOME &&
		!PG_ARGISNULL(CLAIM_WAIT_FOR_OUTCOME);
	TimestampTz wait_end = 0;
	const ClaimResultType *rt = claim_result_type(fcinfo);
	Datum		values[6];
	bool		nulls[6] = {false};

	idem_require_arg(fcinfo, CLAIM_WAIT, "wait", "idem_claim");
	idem_require_read_write("idem_claim");
	loop.wait = PG_GETARG_BOOL(CLAIM_WAIT);
	claim_times(fcinfo, &t);	/* check ttl and lease before anything */
	if (waits)
	{
		wait_end = idem_interval_end(fcinfo, CLAIM_WAIT_FOR_OUTCOME,
									 "wait_for_outcome", t.now);
		idem_outcome_wait_require();
		require_waitable_transaction(&id);
	}
	if (t.leased)
		require_own_transaction(&id);

	if (!waits)
		claim_answer(fcinfo, &id, fingerprint, &loop, &a);
	else
		claim_waiting_for_outcome(fcinfo, &id, fingerprint, &loop, &a, t.now,
								  wait_end);
	idem_count(a.outcome == OUTCOME_CLAIMED ? IDEM_COUNT_CLAIMS :
			   a.outcome == OUTCOME_REPLAY ? IDEM_COUNT_REPLAYS : IDEM_COUNT_IN_PROGRESS);

	/* every in_progress answer says when to retry */
	if (a.outcome == OUTCOME_IN_PROGRESS && a.retry_after == NULL)
	{
		a.retry_after = palloc0(sizeof(Interval));
		a.retry_after->time = (int64) idem_retry_after * 1000;	/* ms to us */
	}

	values[0] = CStringGetTextDatum(outcome_names[a.outcome]);
	if (a.has_record)
	{
		values[1] = rt->status[a.status];
		values[3] = Int64GetDatum(a.fence);
	}
	else
		nulls[1] = nulls[3] = true;
	values[2] = PointerGetDatum(a.result);
	nulls[2] = a.result == NULL;
	values[4] = a.recovery_point ? CStringGetTextDatum(a.recovery_point) : (Datum) 0;
	nulls[4] = a.recovery_point == NULL;
	values[5] = PointerGetDatum(a.retry_after);
	nulls[5] = a.retry_after == NULL;

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(rt->desc, values, nulls)));
}

/*
 * idem_lookup(key text, scope text) RETURNS SETOF idempotent_record
 *	  The unexpired record of (scope, key) as the caller may see it, without
 *	  claiming: zero or one row.  Errors: 22004 NULL, 22023 bad key.
 */
PG_FUNCTION_INFO_V1(idem_lookup);
Datum
idem_lookup(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, 0, 1, "idem_lookup");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTuple	tuple;

	InitMaterializedSRF(fcinfo, 0);
	idem_store_begin(fcinfo->flinfo->fn_oid, false, id.scope);
	tuple = idem_store_lookup(&id, GetCurrentTimestamp());
	idem_store_end();
	if (tuple != NULL)
		tuplestore_puttuple(rsinfo->setResult, tuple);
	return (Datum) 0;
}

/*
 * idem_pending_at(at timestamptz) RETURNS TABLE (scope, key, status, fence,
 *				   recovery_point, detail, locked_until, created_at,
 *				   updated_at, expires_at)
 *	  The rows of the idem_pending view as of at, unordered: unknown
 *	  records and in_progress ones whose lease (or claim time, for an
 *	  in-transaction claim) ended by at.  With the caller's privileges and
 *	  row level security, or, for a role with no privilege on the table, as
 *	  its owner and only in the scopes granted to the role.  Errors: 22004
 *	  NULL at.
 */
PG_FUNCTION_INFO_V1(idem_pending_at);
Datum
idem_pending_at(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;

	idem_require_arg(fcinfo, 0, "at", "idem_pending_at");
	InitMaterializedSRF(fcinfo, 0);
	idem_store_begin(fcinfo->flinfo->fn_oid, false, NULL);
	idem_store_pending(PG_GETARG_TIMESTAMPTZ(0), rsinfo->setResult);
	idem_store_end();
	return (Datum) 0;
}
