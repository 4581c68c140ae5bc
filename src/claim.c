/*
 * claim.c
 *	  The SQL-callable core: idem_claim, idem_finish, idem_fail and
 *	  idem_lookup, with the argument checks they share.
 *
 * Semantics follow DESIGN §3 and the IETF Idempotency-Key draft: the first
 * request with a key does the work, every duplicate gets the first outcome.
 * Concurrency is left to the primary key, as with INSERT ... ON CONFLICT: a
 * duplicate waits for an uncommitted claim and then replays or claims.
 */
#include "idempotency.h"

#include "access/htup_details.h"
#include "catalog/pg_type_d.h"
#include "fmgr.h"
#include "funcapi.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

/* Raise 22004 when argument argno of fn is NULL */
static void
require_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			const char *fn)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"%s\" of %s must not be null", argname, fn));
}

static void
check_length(const char *what, const char *value)
{
	int			len = pg_mbstrlen(value);

	if (len > idem_max_key_length)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("idempotency %s is too long", what),
				errdetail("The %s has %d characters; the limit is %d.",
						  what, len, idem_max_key_length),
				errhint("Send a shorter %s (a UUID is 36 characters), or raise idempotency.max_key_length.", what));
}

/*
 * The (scope, key) of a call: key at argument key_arg, scope at scope_arg.
 * NULL → 22004; empty key, over-long key or scope → 22023.
 */
static IdemKey
get_idem_key(FunctionCallInfo fcinfo, int key_arg, int scope_arg,
			 const char *fn)
{
	IdemKey		id;

	require_arg(fcinfo, key_arg, "key", fn);
	require_arg(fcinfo, scope_arg, "scope", fn);
	id.key = text_to_cstring(PG_GETARG_TEXT_PP(key_arg));
	id.scope = text_to_cstring(PG_GETARG_TEXT_PP(scope_arg));

	if (id.key[0] == '\0')
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("idempotency key must not be empty"),
				errhint("Send a unique key per logical request, for example a UUID."));
	check_length("key", id.key);
	check_length("scope", id.scope);
	return id;
}

static const Interval zero_interval = {0, 0, 0};

/* expires_at of a claim made at now: now + ttl, or the GUC default */
static TimestampTz
claim_expiry(FunctionCallInfo fcinfo, int ttl_arg, TimestampTz now)
{
	Interval   *ttl;
	TimestampTz expires_at;

	if (PG_ARGISNULL(ttl_arg))
		return TimestampTzPlusMilliseconds(now, (int64) idem_default_ttl * 1000);

	/*
	 * Positive as an interval ('1 month -30 days' is not, whatever the date)
	 * and on the calendar from now.
	 */
	ttl = PG_GETARG_INTERVAL_P(ttl_arg);
	expires_at = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
														 TimestampTzGetDatum(now),
														 IntervalPGetDatum(ttl)));
	if (DatumGetBool(DirectFunctionCall2(interval_le, IntervalPGetDatum(ttl),
										 IntervalPGetDatum(&zero_interval))) ||
		expires_at <= now)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("ttl must be a positive interval"),
				errdetail("The ttl given is %s.",
						  DatumGetCString(DirectFunctionCall1(interval_out,
															  IntervalPGetDatum(ttl)))),
				errhint("Pass how long duplicates must be answered, for example '24 hours', or NULL for idempotency.default_ttl."));
	return expires_at;
}

static void
check_fingerprint(const IdemKey *id, bytea *stored, bytea *given)
{
	if (stored == NULL || given == NULL)
		return;
	if (VARSIZE_ANY_EXHDR(stored) == VARSIZE_ANY_EXHDR(given) &&
		memcmp(VARDATA_ANY(stored), VARDATA_ANY(given), VARSIZE_ANY_EXHDR(given)) == 0)
		return;
	ereport(ERROR,
			errcode(ERRCODE_IDEM_FINGERPRINT_MISMATCH),
			errmsg("idempotency key was already used for a different request"),
			errdetail("Key \"%s\" in scope \"%s\" is held by a request with fingerprint %s; this request has fingerprint %s.",
					  id->key, id->scope,
					  DatumGetCString(DirectFunctionCall1(byteaout, PointerGetDatum(stored))),
					  DatumGetCString(DirectFunctionCall1(byteaout, PointerGetDatum(given)))),
			errhint("Use a new idempotency key for a new request (HTTP 422)."));
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
} ClaimAnswer;

static void
answer_from_record(ClaimAnswer *a, ClaimOutcome outcome, const IdemRecord *rec)
{
	a->outcome = outcome;
	a->has_record = true;
	a->status = rec->status;
	a->result = rec->result;
	a->fence = rec->fence;
	a->recovery_point = rec->recovery_point;
	a->retry_after = NULL;
}

static void
answer_claimed(ClaimAnswer *a, int64 fence, char *recovery_point)
{
	a->outcome = OUTCOME_CLAIMED;
	a->has_record = true;
	a->status = IDEM_IN_PROGRESS;
	a->result = NULL;
	a->fence = fence;
	a->recovery_point = recovery_point;
	a->retry_after = NULL;
}

/*
 * Is another transaction writing the record of id right now?  If so, and
 * the caller may see that uncommitted record, its fingerprint must match.
 */
static bool
busy_elsewhere(const IdemKey *id, bytea *fingerprint)
{
	bytea	   *other_fingerprint;
	bool		comparable;

	if (!store_probe_uncommitted(id, &other_fingerprint, &comparable))
		return false;
	if (comparable)
		check_fingerprint(id, other_fingerprint, fingerprint);
	return true;
}

static bool
answer_in_progress(ClaimAnswer *a)
{
	memset(a, 0, sizeof(*a));
	a->outcome = OUTCOME_IN_PROGRESS;
	return true;
}

/*
 * A claim write changed nothing.  Usually a concurrent transaction changed
 * the record first: return false to try again.  With wait => false it may
 * instead have refused to wait for a lock: answer in_progress.
 */
static bool
write_lost(const IdemKey *id, bytea *fingerprint, bool wait, ClaimAnswer *a)
{
	if (wait || !store_write_would_wait())
		return false;
	(void) busy_elsewhere(id, fingerprint);
	return answer_in_progress(a);
}

/*
 * One attempt to claim id.  Returns false when a concurrent transaction
 * changed the record between our read and our write; the caller tries
 * again with a new snapshot (READ COMMITTED), as EvalPlanQual would.
 */
static bool
claim_attempt(const IdemKey *id, bytea *fingerprint, FunctionCallInfo fcinfo,
			  bool wait, ClaimAnswer *a)
{
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz expires_at = claim_expiry(fcinfo, 3, now);
	IdemRecord	rec;
	HeldClaim  *mine;
	int64		new_fence;

	if (!wait && busy_elsewhere(id, fingerprint))
		return answer_in_progress(a);

	if (!store_read(id, &rec))
	{
		if (!store_insert(id, fingerprint, now, expires_at))
			return write_lost(id, fingerprint, wait, a);
		answer_claimed(a, 1, NULL);
		claims_add(id, 1);
		return true;
	}

	/*
	 * Our own open claim, made earlier in this transaction: the key is
	 * already ours, even if its ttl has run out meanwhile.
	 */
	mine = claims_find(id);
	if (mine != NULL && mine->finished_in == InvalidSubTransactionId)
	{
		check_fingerprint(id, rec.fingerprint, fingerprint);
		answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
		return true;
	}

	/* an expired record counts as absent: no fingerprint check */
	if (rec.expires_at <= now)
	{
		if (!store_reclaim_expired(id, rec.fence, fingerprint, now, expires_at,
								   &new_fence))
			return write_lost(id, fingerprint, wait, a);
		answer_claimed(a, new_fence, NULL);
		claims_add(id, new_fence);
		return true;
	}

	check_fingerprint(id, rec.fingerprint, fingerprint);

	switch (rec.status)
	{
		case IDEM_SUCCEEDED:
		case IDEM_FAILED:
			answer_from_record(a, OUTCOME_REPLAY, &rec);
			return true;
		case IDEM_UNKNOWN:
			answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
			return true;
		case IDEM_IN_PROGRESS:
			break;
	}

	if (rec.has_lease && rec.locked_until > now)
	{
		answer_from_record(a, OUTCOME_IN_PROGRESS, &rec);
		a->retry_after = DatumGetIntervalP(DirectFunctionCall2(timestamp_mi,
															   TimestampTzGetDatum(rec.locked_until),
															   TimestampTzGetDatum(now)));
		return true;
	}

	/* committed in progress without a live lease: the owner is gone */
	if (!store_take_over(id, rec.fence, fingerprint, now, expires_at, &new_fence))
		return write_lost(id, fingerprint, wait, a);
	answer_claimed(a, new_fence, rec.recovery_point);
	claims_add(id, new_fence);
	return true;
}

/*
 * idem_claim(key text, scope text, fingerprint bytea, ttl interval,
 *			  wait boolean) RETURNS (outcome, status, result, fence,
 *			  recovery_point, retry_after)
 *	  Claim (scope, key) in the caller's transaction, or learn what to
 *	  replay.  Errors: IK001 fingerprint mismatch, 22004 NULL key, scope or
 *	  wait, 22023 empty/over-long key or scope, non-positive ttl; 40001 and
 *	  40P01 come from the unique index as for INSERT ... ON CONFLICT.
 */
PG_FUNCTION_INFO_V1(idem_claim);
Datum
idem_claim(PG_FUNCTION_ARGS)
{
	IdemKey		id = get_idem_key(fcinfo, 0, 1, "idem_claim");
	bytea	   *fingerprint = PG_ARGISNULL(2) ? NULL : PG_GETARG_BYTEA_PP(2);
	bool		wait;
	ClaimAnswer a;
	TupleDesc	desc;
	Datum		values[6];
	bool		nulls[6] = {false};

	require_arg(fcinfo, 4, "wait", "idem_claim");
	wait = PG_GETARG_BOOL(4);
	if (get_call_result_type(fcinfo, NULL, &desc) != TYPEFUNC_COMPOSITE)
		elog(ERROR, "idem_claim must return a composite type");
	/* check ttl before touching anything */
	(void) claim_expiry(fcinfo, 3, GetCurrentTimestamp());

	store_begin(fcinfo->flinfo->fn_oid, !wait);
	while (!claim_attempt(&id, fingerprint, fcinfo, wait, &a))
		CHECK_FOR_INTERRUPTS();
	store_end();

	values[0] = CStringGetTextDatum(outcome_names[a.outcome]);
	if (a.has_record)
	{
		values[1] = DirectFunctionCall2(enum_in,
										CStringGetDatum(idem_status_names[a.status]),
										ObjectIdGetDatum(TupleDescAttr(desc, 1)->atttypid));
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

	PG_RETURN_DATUM(HeapTupleGetDatum(heap_form_tuple(BlessTupleDesc(desc), values, nulls)));
}

/* The open claim of id in this transaction, or IK002 */
static HeldClaim *
require_open_claim(const IdemKey *id, const char *fn)
{
	HeldClaim  *claim = claims_find(id);

	if (claim == NULL || claim->finished_in != InvalidSubTransactionId)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_NOT_HELD),
				errmsg("idempotency key is not claimed by this transaction"),
				errdetail(claim == NULL
						  ? "Key \"%s\" in scope \"%s\" has no open claim made by idem_claim in this transaction."
						  : "Key \"%s\" in scope \"%s\" already has its outcome recorded in this transaction.",
						  id->key, id->scope),
				errhint("Call %s in the transaction whose idem_claim answered \"claimed\", once per claim.", fn));
	return claim;
}

/* Write an outcome (or release) for the open claim; IK002 if the row went */
static void
record_outcome(FunctionCallInfo fcinfo, const IdemKey *id, const char *fn,
			   bool release, IdemStatus status, Jsonb *result)
{
	HeldClaim  *claim = require_open_claim(id, fn);
	bool		done;

	store_begin(fcinfo->flinfo->fn_oid, false);
	if (release)
		done = store_delete(id, claim->fence);
	else
		done = store_set_outcome(id, claim->fence, status, result,
								 GetCurrentTimestamp());
	store_end();

	if (!done)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_NOT_HELD),
				errmsg("idempotency record of a claimed key is gone"),
				errdetail("Key \"%s\" in scope \"%s\" with fence " INT64_FORMAT " no longer exists.",
						  id->key, id->scope, claim->fence),
				errhint("Something deleted or changed the row in idempotent_record after idem_claim; roll back."));
	claims_mark_finished(claim);
}

/*
 * idem_finish(key text, result jsonb, scope text) RETURNS void
 *	  Record success for a key claimed in this transaction: status
 *	  succeeded, result replayed to duplicates.  Errors: IK002 no open claim
 *	  in this transaction, 22004 NULL argument.
 */
PG_FUNCTION_INFO_V1(idem_finish);
Datum
idem_finish(PG_FUNCTION_ARGS)
{
	IdemKey		id = get_idem_key(fcinfo, 0, 2, "idem_finish");

	require_arg(fcinfo, 1, "result", "idem_finish");
	record_outcome(fcinfo, &id, "idem_finish", false, IDEM_SUCCEEDED,
				   PG_GETARG_JSONB_P(1));
	PG_RETURN_VOID();
}

/*
 * idem_fail(key text, error jsonb, retryable boolean, scope text)
 *	  RETURNS void
 *	  Record failure for a key claimed in this transaction.  retryable:
 *	  release the key (the record is deleted; the next claim is claimed).
 *	  Not retryable: status failed, error replayed to duplicates.  Errors:
 *	  IK002 no open claim in this transaction, 22004 NULL argument.
 */
PG_FUNCTION_INFO_V1(idem_fail);
Datum
idem_fail(PG_FUNCTION_ARGS)
{
	IdemKey		id = get_idem_key(fcinfo, 0, 3, "idem_fail");

	require_arg(fcinfo, 1, "error", "idem_fail");
	require_arg(fcinfo, 2, "retryable", "idem_fail");
	record_outcome(fcinfo, &id, "idem_fail", PG_GETARG_BOOL(2), IDEM_FAILED,
				   PG_GETARG_JSONB_P(1));
	PG_RETURN_VOID();
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
	IdemKey		id = get_idem_key(fcinfo, 0, 1, "idem_lookup");
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	HeapTuple	tuple;

	InitMaterializedSRF(fcinfo, 0);
	store_begin(fcinfo->flinfo->fn_oid, false);
	tuple = store_lookup(&id, GetCurrentTimestamp());
	store_end();
	if (tuple != NULL)
		tuplestore_puttuple(rsinfo->setResult, tuple);
	return (Datum) 0;
}
