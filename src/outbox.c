/*
 * outbox.c
 *	  The transactional outbox: a message enqueued in the producer's
 *	  transaction exists exactly when that transaction commits; relays
 *	  claim batches of pending messages, publish them and mark them sent
 *	  after the broker's confirm.
 *
 * A claim locks its batch with FOR UPDATE SKIP LOCKED, so a second relay
 * neither waits for the first nor gets its rows, and stamps the batch
 * with a fence drawn from a sequence (larger than every fence before) and
 * a lease: the rows become claimable again when the lease ends
 * (available_at), and a relay that took them over stamps its own fence.
 * Marking sent or failed needs the fence the rows carry, so a relay whose
 * lease was taken over cannot mark (IK003): it has at most published a
 * message twice, which the consumer's inbox deduplicates by message ID.
 * A mark with the current fence is accepted after the lease ended, as
 * long as nobody claimed the rows since (the publish did happen).
 *
 * Calls work as records' and tokens' do (delegation.c): with the caller's
 * privileges when it holds any on the table, else as the table's owner
 * after the scope check (enqueue) or, for the relay's functions, which
 * work on every scope and are revoked from PUBLIC, after EXECUTE.
 * Statements are saved plans with qualified names; the clock is read once
 * per call and passed as a parameter.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "funcapi.h"
#include "miscadmin.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgrprotos.h"
#include "utils/jsonb.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/uuid.h"

#include "args.h"
#include "delegation.h"
#include "extension_relation.h"
#include "idempotency.h"
#include "outbox.h"
#include "saved_plans.h"
#include "stats.h"

typedef enum OutboxPlanId
{
	OUTBOX_PLAN_ENQUEUE,
	OUTBOX_PLAN_CLAIM,
	OUTBOX_PLAN_MARK_SENT,
	OUTBOX_PLAN_FIRST_NOT_HELD,
	OUTBOX_PLAN_MARK_FAILED,
	OUTBOX_PLAN_DESCRIBE,
	OUTBOX_PLAN_REQUEUE,
	OUTBOX_PLAN_PURGE,
	NUM_OUTBOX_PLANS
} OutboxPlanId;

#define EQ " OPERATOR(pg_catalog.=) "
#define LE " OPERATOR(pg_catalog.<=) "
#define GE " OPERATOR(pg_catalog.>=) "
#define PENDING " status" EQ "'pending'"
/* held by fence: claimed with it and not failed, requeued or claimed since */
#define HELD_BY(fence) " fence" EQ fence " AND" PENDING " AND locked_until IS NOT NULL"

/* %1$s is the qualified table name */
static const SavedPlanDef outbox_plan_defs[NUM_OUTBOX_PLANS] = {
	[OUTBOX_PLAN_ENQUEUE] = {
		"INSERT INTO %1$s (message_id, scope, destination, payload, headers,"
		" created_at, available_at) VALUES ($1, $2, $3, $4, $5, $6, $6)",
		6, {UUIDOID, TEXTOID, TEXTOID, JSONBOID, JSONBOID, TIMESTAMPTZOID}
	},

	/*
	 * the oldest available pending rows not locked by anyone (a relay's
	 * claim or mark); the batch is materialized so that its bound does not
	 * depend on the plan; the fence ($3, the sequence) is drawn once, by
	 * the first row claimed (an uncorrelated subquery: an init plan)
	 */
	[OUTBOX_PLAN_CLAIM] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT message_id FROM ONLY %1$s WHERE" PENDING " AND available_at" LE "$1"
		" ORDER BY available_at LIMIT $2 FOR UPDATE SKIP LOCKED),"
		" claimed AS ("
		"UPDATE ONLY %1$s AS o SET fence = (SELECT pg_catalog.nextval($3)), attempts = o.attempts OPERATOR(pg_catalog.+) 1,"
		" locked_until = $4, available_at = $4"
		" FROM batch WHERE o.message_id" EQ "batch.message_id"
		" RETURNING o.message_id, o.scope, o.destination, o.payload, o.headers,"
		" o.attempts, o.fence, o.created_at)"
		" SELECT * FROM claimed ORDER BY created_at, message_id",
		4, {TIMESTAMPTZOID, INT4OID, REGCLASSOID, TIMESTAMPTZOID}
	},
	[OUTBOX_PLAN_MARK_SENT] = {
		"UPDATE ONLY %1$s SET status = 'sent', sent_at = $3, expires_at = $4,"
		" locked_until = NULL"
		" WHERE message_id" EQ "ANY ($1) AND" HELD_BY("$2")
		" RETURNING created_at",
		4, {UUIDARRAYOID, INT8OID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	/* after MARK_SENT: a message of the list not sent under the fence */
	[OUTBOX_PLAN_FIRST_NOT_HELD] = {
		"SELECT i.id FROM pg_catalog.unnest($1) AS i(id)"
		" WHERE NOT EXISTS (SELECT FROM ONLY %1$s AS o"
		" WHERE o.message_id" EQ "i.id AND o.fence" EQ "$2"
		" AND o.status" EQ "'sent') LIMIT 1",
		2, {UUIDARRAYOID, INT8OID}
	},
	/* a retry after $4, or dead when the claims reached $5 */
	[OUTBOX_PLAN_MARK_FAILED] = {
		"UPDATE ONLY %1$s SET status = CASE WHEN attempts" GE "$5"
		" THEN 'dead' ELSE 'pending' END,"
		" last_error = $3, available_at = $4, locked_until = NULL"
		" WHERE message_id" EQ "$1 AND" HELD_BY("$2")
		" RETURNING status",
		5, {UUIDOID, INT8OID, TEXTOID, TIMESTAMPTZOID, INT4OID}
	},
	[OUTBOX_PLAN_DESCRIBE] = {
		"SELECT status, fence FROM ONLY %1$s WHERE message_id" EQ "$1",
		1, {UUIDOID}
	},
	[OUTBOX_PLAN_REQUEUE] = {
		"UPDATE ONLY %1$s SET status = 'pending', attempts = 0, available_at = $2,"
		" locked_until = NULL WHERE message_id" EQ "$1 AND status" EQ "'dead'",
		2, {UUIDOID, TIMESTAMPTZOID}
	},
	/* sent rows past their retention; SKIP LOCKED and a batch as for records */
	[OUTBOX_PLAN_PURGE] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT message_id FROM ONLY %1$s WHERE status" EQ "'sent' AND expires_at" LE "$1"
		" ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM ONLY %1$s AS o USING batch"
		" WHERE o.message_id" EQ "batch.message_id",
		2, {TIMESTAMPTZOID, INT4OID}
	},
};

static SPIPlanPtr outbox_plan_cache[NUM_OUTBOX_PLANS];
static SavedPlans outbox_plans = SAVED_PLANS_INIT("idempotency_outbox", outbox_plan_defs,
												  outbox_plan_cache);

/* The outbox's work of one call: the schema, and who it runs as */
typedef struct OutboxCall
{
	Oid			namespace;
	IdemActor	actor;
} OutboxCall;

/*
 * Begin fn's work on the outbox: with the caller's privileges when it has
 * any on the table, else as its owner after the check of scope (NULL:
 * gated by EXECUTE), inside SPI until outbox_end.
 */
static void
outbox_begin(OutboxCall *call, Oid fn, const char *scope)
{
	call->namespace = get_func_namespace(fn);
	idem_actor_begin(&call->actor,
					 idem_extension_relation("idempotency_outbox", call->namespace),
					 call->namespace, scope);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
}

static void
outbox_end(OutboxCall *call)
{
	SPI_finish();
	idem_actor_end(&call->actor);
}

static uint64
outbox_exec(OutboxCall *call, OutboxPlanId id, Datum *values, const char *nulls,
			int expected)
{
	return idem_saved_plan_exec(&outbox_plans, id, call->namespace, values,
								nulls, expected);
}

static char *
uuid_text(Datum id)
{
	return DatumGetCString(DirectFunctionCall1(uuid_out, id));
}

/*
 * IK003 for message id, which the fence does not hold: say who holds it
 * now, or that it is gone.
 */
static pg_noreturn void
refuse_stale_fence(OutboxCall *call, Datum id, int64 fence)
{
	Datum		values[1] = {id};
	char	   *status = NULL;
	int64		current = 0;

	if (outbox_exec(call, OUTBOX_PLAN_DESCRIBE, values, NULL, SPI_OK_SELECT) == 1)
	{
		bool		isnull;

		status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
		current = DatumGetInt64(SPI_getbinval(SPI_tuptable->vals[0],
											  SPI_tuptable->tupdesc, 2, &isnull));
	}
	idem_count(IDEM_COUNT_STALE_FENCES);
	ereport(ERROR,
			errcode(ERRCODE_IDEM_STALE_FENCE),
			errmsg("outbox message %s is not held under fence " INT64_FORMAT,
				   uuid_text(id), fence),
			status == NULL ?
			errdetail("The outbox has no such message (never enqueued, or sent and purged).") :
			errdetail("Its status is %s and its fence " INT64_FORMAT ".", status, current),
			errhint("Another relay claimed the message after this claim's lease ended, or it was marked already; leave it to that relay (a message published twice is deduplicated by the consumer's inbox)."));
}

/*
 * idem_outbox_enqueue(destination text, payload jsonb, headers jsonb,
 *					   message_id uuid, scope text) RETURNS uuid
 *	  Insert a pending message in the caller's transaction and return its
 *	  ID: message_id, or a new random (version 4) UUID when it is NULL.
 *	  headers NULL is {}.  Errors: 22004 NULL destination, payload or
 *	  scope, 22023 empty destination, headers not a JSON object, over-long
 *	  scope, 23505 message_id already in the outbox, 25006 read-only
 *	  transaction or standby, 42501 scope not granted, 55000 code attached
 *	  to the table (delegated mode).
 */
PG_FUNCTION_INFO_V1(idem_outbox_enqueue);
Datum
idem_outbox_enqueue(PG_FUNCTION_ARGS)
{
	Datum		values[6];
	char	   *scope;
	OutboxCall	call;

	idem_require_arg(fcinfo, 0, "destination", "idem_outbox_enqueue");
	idem_require_arg(fcinfo, 1, "payload", "idem_outbox_enqueue");
	idem_require_arg(fcinfo, 4, "scope", "idem_outbox_enqueue");
	if (VARSIZE_ANY_EXHDR(PG_GETARG_TEXT_PP(0)) == 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("outbox destination must not be empty"),
				errhint("Name the routing key or queue the relay publishes the message to."));
	if (!PG_ARGISNULL(2) && !JB_ROOT_IS_OBJECT(PG_GETARG_JSONB_P(2)))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("outbox headers must be a JSON object"),
				errhint("Pass an object such as '{\"content-language\": \"en\"}', or NULL for none."));
	scope = text_to_cstring(PG_GETARG_TEXT_PP(4));
	idem_check_length(scope, true);
	idem_require_read_write("idem_outbox_enqueue");

	values[0] = PG_ARGISNULL(3) ? DirectFunctionCall1(gen_random_uuid, (Datum) 0) :
		PG_GETARG_DATUM(3);
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(4));
	values[2] = PointerGetDatum(PG_GETARG_TEXT_PP(0));
	values[3] = PointerGetDatum(PG_GETARG_JSONB_P(1));
	values[4] = PG_ARGISNULL(2) ?
		DirectFunctionCall1(jsonb_in, CStringGetDatum("{}")) :
		PointerGetDatum(PG_GETARG_JSONB_P(2));
	values[5] = TimestampTzGetDatum(GetCurrentTimestamp());

	outbox_begin(&call, fcinfo->flinfo->fn_oid, scope);
	outbox_exec(&call, OUTBOX_PLAN_ENQUEUE, values, NULL, SPI_OK_INSERT);
	outbox_end(&call);
	idem_count_at_commit(IDEM_COUNT_OUTBOX_ENQUEUED, 1);
	PG_RETURN_DATUM(values[0]);
}

/* 22023 unless the integer argument argno is at least 1 */
static int32
positive_int_arg(FunctionCallInfo fcinfo, int argno, const char *argname)
{
	int32		value = PG_GETARG_INT32(argno);

	if (value < 1)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s must be at least 1", argname),
				errdetail("The %s given is %d.", argname, value));
	return value;
}

/*
 * idem_outbox_claim(batch_size integer, lease interval) RETURNS TABLE
 *	  (message_id, scope, destination, payload, headers, attempts, fence,
 *	  created_at)
 *	  Claim up to batch_size pending messages whose available_at has come,
 *	  oldest available first, skipping rows other sessions have locked:
 *	  each gets one new fence, attempts + 1 and a lease until server time
 *	  + lease, after which another claim may take it over.  Rows ordered by
 *	  created_at.  Errors: 22004 NULL, 22023 batch_size < 1 or lease not
 *	  positive, 22008 lease too long, 25006 read-only transaction or
 *	  standby, 42501 no EXECUTE privilege, 55000 code attached to the
 *	  table (delegated mode).
 */
PG_FUNCTION_INFO_V1(idem_outbox_claim);
Datum
idem_outbox_claim(PG_FUNCTION_ARGS)
{
	ReturnSetInfo *rsinfo = (ReturnSetInfo *) fcinfo->resultinfo;
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[4];
	uint64		n;
	OutboxCall	call;

	idem_require_arg(fcinfo, 0, "batch_size", "idem_outbox_claim");
	idem_require_arg(fcinfo, 1, "lease", "idem_outbox_claim");
	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(positive_int_arg(fcinfo, 0, "batch_size"));
	values[3] = TimestampTzGetDatum(idem_interval_end(fcinfo, 1, "lease", now));
	idem_require_read_write("idem_outbox_claim");

	InitMaterializedSRF(fcinfo, 0);
	outbox_begin(&call, fcinfo->flinfo->fn_oid, NULL);
	values[2] = ObjectIdGetDatum(idem_extension_relation("idempotency_outbox_fence_seq",
														 call.namespace));
	n = outbox_exec(&call, OUTBOX_PLAN_CLAIM, values, NULL, SPI_OK_SELECT);
	for (uint64 i = 0; i < n; i++)
		tuplestore_puttuple(rsinfo->setResult, SPI_tuptable->vals[i]);
	outbox_end(&call);
	return (Datum) 0;
}

/*
 * idem_outbox_mark_sent(message_ids uuid[], fence bigint) RETURNS integer
 *	  The broker confirmed message_ids: each becomes sent, kept until
 *	  server time + idempotency.default_ttl.  All or none: every message
 *	  must be held under fence (claimed with it and not claimed since), or
 *	  already sent under it (a repeated mark); returns how many this call
 *	  marked.  Errors: 22004 NULL argument or element, IK003 a message not
 *	  held under fence (taken over, never claimed with it, dead, purged),
 *	  25006 read-only transaction or standby, 42501 no EXECUTE privilege,
 *	  55000 code attached to the table (delegated mode).
 */
PG_FUNCTION_INFO_V1(idem_outbox_mark_sent);
Datum
idem_outbox_mark_sent(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[4];
	uint64		marked;
	uint64		lag_us = 0;
	OutboxCall	call;

	idem_require_arg(fcinfo, 0, "message_ids", "idem_outbox_mark_sent");
	idem_require_arg(fcinfo, 1, "fence", "idem_outbox_mark_sent");
	if (array_contains_nulls(PG_GETARG_ARRAYTYPE_P(0)))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("message_ids of idem_outbox_mark_sent must not contain nulls"));
	idem_require_read_write("idem_outbox_mark_sent");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(TimestampTzPlusMilliseconds(now, (int64) idem_default_ttl * 1000));

	outbox_begin(&call, fcinfo->flinfo->fn_oid, NULL);
	marked = outbox_exec(&call, OUTBOX_PLAN_MARK_SENT, values, NULL,
						 SPI_OK_UPDATE_RETURNING);
	/* the relay lag of each message marked: its time from enqueue to mark */
	for (uint64 i = 0; i < marked; i++)
	{
		bool		isnull;
		TimestampTz created = DatumGetTimestampTz(SPI_getbinval(SPI_tuptable->vals[i],
																SPI_tuptable->tupdesc, 1, &isnull));

		lag_us += (uint64) Max(now - created, 0);
	}
	if (outbox_exec(&call, OUTBOX_PLAN_FIRST_NOT_HELD, values, NULL, SPI_OK_SELECT) == 1)
	{
		bool		isnull;

		refuse_stale_fence(&call, SPI_getbinval(SPI_tuptable->vals[0],
												SPI_tuptable->tupdesc, 1, &isnull),
						   PG_GETARG_INT64(1));
	}
	outbox_end(&call);
	idem_count_at_commit(IDEM_COUNT_OUTBOX_SENT, marked);
	idem_count_at_commit(IDEM_COUNT_OUTBOX_SEND_LAG_US, lag_us);
	PG_RETURN_INT32((int32) marked);
}

/*
 * idem_outbox_mark_failed(message_id uuid, fence bigint, error text,
 *						   retry_after interval, max_attempts integer)
 *	  RETURNS text
 *	  Publishing message_id failed: error is kept in last_error, the lease
 *	  dropped, and the message is claimable again at server time +
 *	  retry_after (status pending), or, when it has been claimed
 *	  max_attempts times, given up (status dead, listed by
 *	  idem_outbox_dead).  Returns the new status.  Errors: 22004 NULL
 *	  argument, 22023 retry_after not positive or max_attempts < 1, 22008
 *	  retry_after too long, IK003 not held under fence, 25006 read-only
 *	  transaction or standby, 42501 no EXECUTE privilege, 55000 code
 *	  attached to the table (delegated mode).
 */
PG_FUNCTION_INFO_V1(idem_outbox_mark_failed);
Datum
idem_outbox_mark_failed(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	Datum		values[5];
	char	   *status;
	OutboxCall	call;

	idem_require_arg(fcinfo, 0, "message_id", "idem_outbox_mark_failed");
	idem_require_arg(fcinfo, 1, "fence", "idem_outbox_mark_failed");
	idem_require_arg(fcinfo, 2, "error", "idem_outbox_mark_failed");
	idem_require_arg(fcinfo, 3, "retry_after", "idem_outbox_mark_failed");
	idem_require_arg(fcinfo, 4, "max_attempts", "idem_outbox_mark_failed");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = PG_GETARG_DATUM(1);
	values[2] = PG_GETARG_DATUM(2);
	values[3] = TimestampTzGetDatum(idem_interval_end(fcinfo, 3, "retry_after", now));
	values[4] = Int32GetDatum(positive_int_arg(fcinfo, 4, "max_attempts"));
	idem_require_read_write("idem_outbox_mark_failed");

	outbox_begin(&call, fcinfo->flinfo->fn_oid, NULL);
	if (outbox_exec(&call, OUTBOX_PLAN_MARK_FAILED, values, NULL,
					SPI_OK_UPDATE_RETURNING) != 1)
		refuse_stale_fence(&call, values[0], PG_GETARG_INT64(1));
	status = SPI_getvalue(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1);
	outbox_end(&call);
	PG_RETURN_TEXT_P(cstring_to_text(status));
}

/*
 * idem_outbox_requeue(message_id uuid) RETURNS boolean
 *	  Make a dead message pending again, claimable now, attempts 0
 *	  (last_error kept); true when message_id was dead, else false.
 *	  Errors: 22004 NULL, 25006 read-only transaction or standby, 42501 no
 *	  EXECUTE privilege, 55000 code attached to the table (delegated mode).
 */
PG_FUNCTION_INFO_V1(idem_outbox_requeue);
Datum
idem_outbox_requeue(PG_FUNCTION_ARGS)
{
	Datum		values[2];
	bool		requeued;
	OutboxCall	call;

	idem_require_arg(fcinfo, 0, "message_id", "idem_outbox_requeue");
	idem_require_read_write("idem_outbox_requeue");
	values[0] = PG_GETARG_DATUM(0);
	values[1] = TimestampTzGetDatum(GetCurrentTimestamp());
	outbox_begin(&call, fcinfo->flinfo->fn_oid, NULL);
	requeued = outbox_exec(&call, OUTBOX_PLAN_REQUEUE, values, NULL, SPI_OK_UPDATE) == 1;
	outbox_end(&call);
	PG_RETURN_BOOL(requeued);
}

/*
 * Delete up to batch_size sent messages past their retention at now, for
 * idem_purge; returns how many.  0 while the extension is older than the
 * library and has no outbox yet (before ALTER EXTENSION UPDATE).
 */
int64
idem_outbox_purge(Oid fn, TimestampTz now, int32 batch_size)
{
	Datum		values[2];
	int64		purged;
	OutboxCall	call;

	if (!OidIsValid(get_relname_relid("idempotency_outbox", get_func_namespace(fn))))
		return 0;
	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch_size);
	outbox_begin(&call, fn, NULL);
	purged = (int64) outbox_exec(&call, OUTBOX_PLAN_PURGE, values, NULL, SPI_OK_DELETE);
	outbox_end(&call);
	return purged;
}
