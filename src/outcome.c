/*
 * outcome.c
 *	  The writes that follow a claim: idem_finish, idem_finish_response,
 *	  idem_fail, idem_mark_unknown, idem_checkpoint and idem_extend_lease.
 *
 * Each is allowed to the holder of the claim only: the transaction that made
 * an in-transaction claim, or whoever presents the current fence of a
 * leased one (the fencing token of the lease; a takeover adds one).  A
 * stale fence is refused with IK003 and changes nothing, so a worker that
 * lost its lease can never overwrite the newer owner's outcome.  The fence
 * stays current after the lease and the ttl ran out, until another claim
 * reclaims or takes over the key: a late write is recorded (an outcome
 * then restarts retention), so that a retry replays it.
 */
#include "postgres.h"

#include "fmgr.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "args.h"
#include "idempotency.h"
#include "message_text.h"
#include "outcome_wait.h"
#include "record_store.h"
#include "stats.h"
#include "stored_response.h"
#include "xact_claims.h"

/* Argument numbers shared by these functions: key first, then ... */
#define ARG_KEY 0

/*
 * IK002 for fn: the key has no record (by_this_transaction false), or no
 * claim of this transaction and no fence was given
 */
pg_noreturn static void
not_claimed_error(const IdemKey *id, const char *fn, bool by_this_transaction)
{
	ereport(ERROR,
			errcode(ERRCODE_IDEM_NOT_HELD),
			by_this_transaction ?
			errmsg("idempotency key is not claimed by this transaction") :
			errmsg("idempotency key is not claimed"),
			by_this_transaction ?
			errdetail("Key \"%s\" in scope \"%s\" has no open claim made by idem_claim in this transaction.",
					  idem_message_value(id->key), idem_message_value(id->scope)) :
			errdetail("Key \"%s\" in scope \"%s\" has no record.",
					  idem_message_value(id->key), idem_message_value(id->scope)),
			by_this_transaction ?
			errhint("Call %s in the transaction whose idem_claim answered \"claimed\", or pass the fence of a leased claim.", fn) :
			errhint("Call %s only after idem_claim answered \"claimed\".", fn));
}

/*
 * A fenced write changed nothing: read the record and say why.  IK003 when
 * the record carries another fence: an older one was taken over (also when
 * the record has expired since), one that the record never issued (zero,
 * negative, newer than its fence) is only wrong.  IK002 otherwise: the
 * record has a final outcome, or is not in the state fn needs, or, for an
 * outcome (records_outcome: any open status will do), the row the write
 * waited for was replaced by a new claim with the same fence, or something
 * on the table (a trigger, a row level security policy) refused it.
 */
static void
explain_refusal(const IdemKey *id, int64 fence, const char *fn,
				bool records_outcome)
{
	IdemRecord	rec;

	if (!idem_store_read(id, &rec))
		not_claimed_error(id, fn, false);
	if (fence != rec.fence)
	{
		bool		taken_over = fence >= 1 && fence < rec.fence;

		idem_count(IDEM_COUNT_STALE_FENCES);
		ereport(ERROR,
				errcode(ERRCODE_IDEM_STALE_FENCE),
				taken_over ?
				errmsg("stale fence: the claim was taken over") :
				errmsg("fence does not match the claim"),
				taken_over ?
				errdetail("Key \"%s\" in scope \"%s\" has fence " INT64_FORMAT "; this call has fence " INT64_FORMAT ".",
						  idem_message_value(id->key), idem_message_value(id->scope), rec.fence, fence) :
				errdetail("Key \"%s\" in scope \"%s\" has fence " INT64_FORMAT "; this call has fence " INT64_FORMAT ", which the record has not issued.",
						  idem_message_value(id->key), idem_message_value(id->scope), rec.fence, fence),
				taken_over ?
				errhint("Only the holder of the current fence may write; a worker whose lease was taken over must stop and record nothing.") :
				errhint("Pass the fence that idem_claim returned; fences start at 1 and grow by one at each reclaim or takeover."));
	}
	if (rec.status == IDEM_SUCCEEDED || rec.status == IDEM_FAILED)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_NOT_HELD),
				errmsg("idempotency key already has an outcome"),
				errdetail("Key \"%s\" in scope \"%s\" has status %s and fence " INT64_FORMAT ".",
						  idem_message_value(id->key), idem_message_value(id->scope), idem_status_names[rec.status], rec.fence),
				errhint("An outcome is recorded once; duplicates replay it."));
	if (records_outcome)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_NOT_HELD),
				errmsg("idempotency record was not updated"),
				errdetail("Key \"%s\" in scope \"%s\" has status %s and fence " INT64_FORMAT ", but the row this call was to update was deleted while it waited (a purge, then a new claim of the key), or a trigger or row level security policy on idempotent_record refused the update.",
						  idem_message_value(id->key), idem_message_value(id->scope), idem_status_names[rec.status], rec.fence),
				errhint("After a purge and a new claim, record nothing: the new claim's holder records the outcome.  Otherwise let the extension's writes pass the table's triggers and policies."));
	ereport(ERROR,
			errcode(ERRCODE_IDEM_NOT_HELD),
			errmsg("%s does not apply to this claim", fn),
			rec.has_lease ?
			errdetail("Key \"%s\" in scope \"%s\" has status %s and a lease.",
					  idem_message_value(id->key), idem_message_value(id->scope), idem_status_names[rec.status]) :
			errdetail("Key \"%s\" in scope \"%s\" has status %s and no lease.",
					  idem_message_value(id->key), idem_message_value(id->scope), idem_status_names[rec.status]),
			errhint("idem_checkpoint needs a claim in progress; idem_extend_lease a leased one."));
}

/*
 * The fence a write of fn must carry, and the claim this transaction holds
 * for id (NULL when it is a leased claim or nobody's).  The transaction
 * holding an in-transaction claim needs no fence (a given one must match);
 * anyone else must present one: IK002 when there is no claim to present it
 * for, IK003 when a leased claim or an unknown outcome needs it.
 */
static int64
required_fence(FunctionCallInfo fcinfo, const IdemKey *id, int fence_arg,
			   const char *fn, HeldClaim **held)
{
	HeldClaim  *claim = idem_claims_find(id);
	IdemRecord	rec;

	*held = NULL;
	if (claim != NULL)
	{
		if (claim->finished_in != InvalidSubTransactionId)
			ereport(ERROR,
					errcode(ERRCODE_IDEM_NOT_HELD),
					errmsg("idempotency key already has an outcome"),
					errdetail("Key \"%s\" in scope \"%s\" had its outcome recorded earlier in this transaction.",
							  idem_message_value(id->key), idem_message_value(id->scope)),
					errhint("An outcome is recorded once; duplicates replay it."));
		if (!PG_ARGISNULL(fence_arg) && PG_GETARG_INT64(fence_arg) != claim->fence)
		{
			idem_count(IDEM_COUNT_STALE_FENCES);
			ereport(ERROR,
					errcode(ERRCODE_IDEM_STALE_FENCE),
					errmsg("fence does not match the claim held by this transaction"),
					errdetail("This transaction holds key \"%s\" in scope \"%s\" with fence " INT64_FORMAT "; this call has fence " INT64_FORMAT ".",
							  idem_message_value(id->key), idem_message_value(id->scope), claim->fence, PG_GETARG_INT64(fence_arg)),
					errhint("Pass the fence that idem_claim returned, or none."));
		}
		*held = claim;
		return claim->fence;
	}

	if (!PG_ARGISNULL(fence_arg))
		return PG_GETARG_INT64(fence_arg);

	if (idem_store_read(id, &rec) &&
		(rec.status == IDEM_UNKNOWN || (rec.status == IDEM_IN_PROGRESS && rec.has_lease)))
	{
		idem_count(IDEM_COUNT_STALE_FENCES);
		ereport(ERROR,
				errcode(ERRCODE_IDEM_STALE_FENCE),
				errmsg("a fence is required to write to a leased claim"),
				errdetail("Key \"%s\" in scope \"%s\" has status %s and fence " INT64_FORMAT ".",
						  idem_message_value(id->key), idem_message_value(id->scope), idem_status_names[rec.status], rec.fence),
				errhint("Pass fence => the fence that your idem_claim returned."));
	}
	not_claimed_error(id, fn, true);
	return 0;					/* keep compiler quiet */
}

/*
 * The row address of the claim this transaction holds, which the store may
 * use and move (idem_claims_row), or NULL
 */
static IdemRowAddress *
held_row(HeldClaim *held)
{
	return held == NULL ? NULL : idem_claims_row(held);
}

typedef enum OutcomeKind
{
	RECORD_SUCCEEDED,
	RECORD_FAILED,
	RECORD_UNKNOWN,
	RELEASE_KEY
} OutcomeKind;

/* Write an outcome, or release the key, as the holder of the claim */
static void
record_outcome(FunctionCallInfo fcinfo, const IdemKey *id, int fence_arg,
			   const char *fn, OutcomeKind kind, Jsonb *result)
{
	static const IdemStatus status_of[] = {IDEM_SUCCEEDED, IDEM_FAILED, IDEM_UNKNOWN};
	HeldClaim  *held;
	int64		fence;
	bool		done;

	idem_require_read_write(fn);
	idem_store_begin(fcinfo->flinfo->fn_oid, false, id->scope);
	fence = required_fence(fcinfo, id, fence_arg, fn, &held);
	if (kind == RELEASE_KEY)
		done = idem_store_release(id, fence, result, GetCurrentTimestamp(),
								  held_row(held));
	else
		done = idem_store_set_outcome(id, fence, status_of[kind], result,
									  GetCurrentTimestamp(), held_row(held));
	if (!done)
		explain_refusal(id, fence, fn, true);
	idem_store_end();
	if (kind != RECORD_UNKNOWN)
		idem_outcome_wait_wake_at_commit(id);

	if (held != NULL)
		idem_claims_mark_finished(held);
}

/*
 * The body of fn(key text, value jsonb, scope text, fence bigint): value
 * (named value_arg) must not be NULL; it is the result or the detail.
 */
static void
record_outcome_call(FunctionCallInfo fcinfo, const char *fn,
					const char *value_arg, OutcomeKind kind)
{
	IdemKey		id = idem_get_key(fcinfo, ARG_KEY, 2, fn);

	idem_require_arg(fcinfo, 1, value_arg, fn);
	record_outcome(fcinfo, &id, 3, fn, kind, PG_GETARG_JSONB_P(1));
}

/*
 * idem_finish(key text, result jsonb, scope text, fence bigint)
 *	  RETURNS void
 *	  Record success: status succeeded, result replayed to duplicates.
 *	  A late write with the current fence is accepted (see above).
 *	  Errors: IK002 no claim held, IK003 missing, stale or never issued
 *	  fence of a leased claim, 22004 NULL key, result or scope, 25006
 *	  read-only transaction or standby.
 */
PG_FUNCTION_INFO_V1(idem_finish);
Datum
idem_finish(PG_FUNCTION_ARGS)
{
	record_outcome_call(fcinfo, "idem_finish", "result", RECORD_SUCCEEDED);
	PG_RETURN_VOID();
}

/*
 * idem_finish_response(key text, status integer, headers jsonb, body bytea,
 *						scope text, fence bigint) RETURNS void
 *	  idem_finish with the stored form of an HTTP response as the result,
 *	  built from the body's bytes (stored_response.c): what the client
 *	  packages record.  Errors as for idem_finish, and 22004 NULL status,
 *	  headers or body, 22023 status outside 100-999 or headers a replay
 *	  cannot send.
 */
PG_FUNCTION_INFO_V1(idem_finish_response);
Datum
idem_finish_response(PG_FUNCTION_ARGS)
{
	const char *fn = "idem_finish_response";
	IdemKey		id = idem_get_key(fcinfo, ARG_KEY, 4, fn);

	idem_require_arg(fcinfo, 1, "status", fn);
	idem_require_arg(fcinfo, 2, "headers", fn);
	idem_require_arg(fcinfo, 3, "body", fn);
	record_outcome(fcinfo, &id, 5, fn, RECORD_SUCCEEDED,
				   idem_stored_response(PG_GETARG_INT32(1),
										PG_GETARG_JSONB_P(2),
										PG_GETARG_BYTEA_PP(3)));
	PG_RETURN_VOID();
}

/*
 * idem_mark_unknown(key text, detail jsonb, scope text, fence bigint)
 *	  RETURNS void
 *	  The outcome of an external call is unknown: status unknown, detail
 *	  stored in result, lease dropped.  Claims answer in_progress and the
 *	  record never expires until a reconciler records the outcome with
 *	  idem_finish or idem_fail (same fence).  Errors as for idem_finish.
 */
PG_FUNCTION_INFO_V1(idem_mark_unknown);
Datum
idem_mark_unknown(PG_FUNCTION_ARGS)
{
	record_outcome_call(fcinfo, "idem_mark_unknown", "detail", RECORD_UNKNOWN);
	PG_RETURN_VOID();
}

/*
 * idem_fail(key text, error jsonb, retryable boolean, scope text,
 *			 fence bigint) RETURNS void
 *	  Record failure.  retryable: release the key for a retry (the record
 *	  stays as a claim whose lease has ended, error kept in result: the
 *	  next claim takes it over with fence + 1, the recovery point and the
 *	  error).  Not retryable: status failed, error replayed to duplicates.
 *	  Errors as for idem_finish.
 */
PG_FUNCTION_INFO_V1(idem_fail);
Datum
idem_fail(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, ARG_KEY, 3, "idem_fail");

	idem_require_arg(fcinfo, 1, "error", "idem_fail");
	idem_require_arg(fcinfo, 2, "retryable", "idem_fail");
	record_outcome(fcinfo, &id, 4, "idem_fail",
				   PG_GETARG_BOOL(2) ? RELEASE_KEY : RECORD_FAILED,
				   PG_GETARG_JSONB_P(1));
	idem_count(IDEM_COUNT_FAILURES);
	PG_RETURN_VOID();
}

/*
 * idem_checkpoint(key text, recovery_point text, scope text, fence bigint)
 *	  RETURNS void
 *	  Save the recovery point of a multi-phase request in the caller's
 *	  transaction, so a phase's writes and its recovery point commit
 *	  together; a takeover returns it.  Errors as for idem_finish, and
 *	  IK002 when the claim is no longer in progress.
 */
PG_FUNCTION_INFO_V1(idem_checkpoint);
Datum
idem_checkpoint(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, ARG_KEY, 2, "idem_checkpoint");
	HeldClaim  *held;
	int64		fence;
	char	   *recovery_point;

	idem_require_arg(fcinfo, 1, "recovery_point", "idem_checkpoint");
	recovery_point = text_to_cstring(PG_GETARG_TEXT_PP(1));
	idem_require_read_write("idem_checkpoint");

	idem_store_begin(fcinfo->flinfo->fn_oid, false, id.scope);
	fence = required_fence(fcinfo, &id, 3, "idem_checkpoint", &held);
	if (!idem_store_checkpoint(&id, fence, recovery_point, GetCurrentTimestamp(),
							   held_row(held)))
		explain_refusal(&id, fence, "idem_checkpoint", false);
	idem_store_end();
	PG_RETURN_VOID();
}

/*
 * idem_extend_lease(key text, lease interval, scope text, fence bigint)
 *	  RETURNS timestamptz
 *	  Heartbeat of long work: the lease now ends at server time + lease
 *	  (returned).  Errors: IK003 missing or stale fence (taken over), IK002
 *	  no leased claim in progress, 22004 NULL key, lease or scope, 22023
 *	  non-positive lease, 22008 lease too long, 25006 read-only transaction
 *	  or standby.
 */
PG_FUNCTION_INFO_V1(idem_extend_lease);
Datum
idem_extend_lease(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, ARG_KEY, 2, "idem_extend_lease");
	TimestampTz now = GetCurrentTimestamp();
	TimestampTz locked_until;
	HeldClaim  *held;
	int64		fence;

	idem_require_arg(fcinfo, 1, "lease", "idem_extend_lease");
	locked_until = idem_interval_end(fcinfo, 1, "lease", now);
	idem_require_read_write("idem_extend_lease");

	idem_store_begin(fcinfo->flinfo->fn_oid, false, id.scope);
	fence = required_fence(fcinfo, &id, 3, "idem_extend_lease", &held);
	if (!idem_store_extend_lease(&id, fence, locked_until, now))
		explain_refusal(&id, fence, "idem_extend_lease", false);
	idem_store_end();
	/* waiters sleep until the lease's end: a shorter one must wake them */
	idem_outcome_wait_wake_at_commit(&id);
	PG_RETURN_TIMESTAMPTZ(locked_until);
}
