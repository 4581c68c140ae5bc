/*
 * tokens.c
 *	  Single-use tokens against double submits: idem_token_issue hands out a
 *	  random token, idem_token_consume answers true for it exactly once.
 *
 * A token is a row of idempotency_token, primary key (scope, token).
 * Consuming is one UPDATE that sets consumed_at where it is still NULL and
 * the token has not expired, so concurrent consumers queue on the row lock
 * and only the first one that commits changes it, as with any UPDATE.
 * Statements are saved plans with schema-qualified names and operators, on
 * the table itself (ONLY: the primary key names a token only there), run
 * with the caller's privileges; the clock is read once per call and
 * passed as a parameter.
 */
#include "postgres.h"

#include "catalog/pg_type_d.h"
#include "common/base64.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "mb/pg_wchar.h"
#include "miscadmin.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"

#include "args.h"
#include "citus.h"
#include "compat.h"
#include "delegation.h"
#include "extension_relation.h"
#include "saved_plans.h"
#include "stats.h"
#include "tokens.h"

/* Random bytes per token: 128 bits, 22 characters of base64url */
#define TOKEN_RANDOM_BYTES 16

typedef enum TokenPlanId
{
	TOKEN_PLAN_INSERT,
	TOKEN_PLAN_CONSUME,
	TOKEN_PLAN_PURGE,
	TOKEN_PLAN_PURGE_SCOPES,
	TOKEN_PLAN_PURGE_SCOPE,
	NUM_TOKEN_PLANS
} TokenPlanId;

#define EQ " OPERATOR(pg_catalog.=) "
#define LE " OPERATOR(pg_catalog.<=) "

/* %1$s is the qualified table name */
static const SavedPlanDef token_plan_defs[NUM_TOKEN_PLANS] = {
	[TOKEN_PLAN_INSERT] = {
		"INSERT INTO %1$s (scope, token, created_at, expires_at)"
		" VALUES ($1, $2, $3, $4) ON CONFLICT (scope, token) DO NOTHING",
		4, {TEXTOID, TEXTOID, TIMESTAMPTZOID, TIMESTAMPTZOID}
	},
	[TOKEN_PLAN_CONSUME] = {
		"UPDATE ONLY %1$s SET consumed_at = $3"
		" WHERE scope" EQ "$1 AND token" EQ "$2"
		" AND consumed_at IS NULL AND expires_at OPERATOR(pg_catalog.>) $3",
		3, {TEXTOID, TEXTOID, TIMESTAMPTZOID}
	},

	/*
	 * expired tokens, consumed or not, named by primary key; SKIP LOCKED
	 * and a batch run once as for records (record_store.c)
	 */
	[TOKEN_PLAN_PURGE] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT scope, token FROM ONLY %1$s WHERE expires_at" LE "$1"
		" ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM ONLY %1$s AS t USING batch"
		" WHERE t.scope" EQ "batch.scope AND t.token" EQ "batch.token",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	/* ... on a Citus table, scope by scope (idem_purge_by_scope) */
	[TOKEN_PLAN_PURGE_SCOPES] = {
		"SELECT scope FROM ONLY %1$s WHERE expires_at" LE "$1"
		" GROUP BY scope ORDER BY pg_catalog.min(expires_at), scope LIMIT $2",
		2, {TIMESTAMPTZOID, INT4OID}
	},
	[TOKEN_PLAN_PURGE_SCOPE] = {
		"WITH batch AS MATERIALIZED ("
		"SELECT token FROM ONLY %1$s WHERE scope" EQ "$3 AND expires_at" LE "$1"
		" ORDER BY expires_at LIMIT $2 FOR UPDATE SKIP LOCKED)"
		" DELETE FROM ONLY %1$s AS t USING batch"
		" WHERE t.scope" EQ "$3 AND t.token" EQ "batch.token",
		3, {TIMESTAMPTZOID, INT4OID, TEXTOID}
	},
};

static SPIPlanPtr token_plan_cache[NUM_TOKEN_PLANS];
static SavedPlans token_plans = SAVED_PLANS_INIT("idempotency_token", token_plan_defs,
												 token_plan_cache);

/* Run plan id against the idempotency_token table of fn's schema */
static uint64
token_exec(Oid fn, TokenPlanId id, Datum *values, int expected)
{
	return idem_saved_plan_exec(&token_plans, id, get_func_namespace(fn), values,
								NULL, expected);
}

/*
 * Begin fn's work on idempotency_token: with the caller's privileges when
 * it has any on the table, else as its owner after the scope check
 * (delegation.c).
 */
static void
token_actor_begin(IdemActor *actor, Oid fn, const char *scope)
{
	Oid			namespace = get_func_namespace(fn);

	idem_actor_begin(actor, idem_extension_relation("idempotency_token", namespace),
					 namespace, scope);
}

/*
 * TOKEN_RANDOM_BYTES from the strong source, in PostgreSQL's base64 made
 * URL-safe (RFC 4648 §5: - and _ for + and /, no = padding).
 */
static char *
random_token(void)
{
	uint8		bytes[TOKEN_RANDOM_BYTES];
	int			size = pg_b64_enc_len(TOKEN_RANDOM_BYTES) + 1;
	char	   *token = palloc(size);
	int			len;

	if (!pg_strong_random(bytes, sizeof(bytes)))
		ereport(ERROR,
				errcode(ERRCODE_INTERNAL_ERROR),
				errmsg("could not generate a random token"),
				errdetail("The operating system's strong random source failed."));
	len = compat_b64_encode(bytes, TOKEN_RANDOM_BYTES, token, size);
	if (len < 0)
		elog(ERROR, "could not encode a random token");
	while (len > 0 && token[len - 1] == '=')
		len--;
	token[len] = '\0';
	for (char *p = token; *p; p++)
		*p = *p == '+' ? '-' : *p == '/' ? '_' : *p;
	return token;
}

/*
 * idem_token_issue(scope text, ttl interval) RETURNS text
 *	  Store a new single-use token of scope, valid for ttl from the server's
 *	  clock, and return it: 22 URL-safe characters (base64url of 128 random
 *	  bits from pg_strong_random).  Errors: 22004 NULL scope or ttl, 22023
 *	  over-long scope or ttl not positive, 22008 ttl too long, 25006
 *	  read-only transaction or standby, 42501 no INSERT privilege on
 *	  idempotency_token.
 */
PG_FUNCTION_INFO_V1(idem_token_issue);
Datum
idem_token_issue(PG_FUNCTION_ARGS)
{
	TimestampTz now = GetCurrentTimestamp();
	MemoryContext caller = CurrentMemoryContext;
	char	   *scope;
	char	   *token;
	Datum		values[4];
	IdemActor	actor;

	idem_require_arg(fcinfo, 0, "scope", "idem_token_issue");
	idem_require_arg(fcinfo, 1, "ttl", "idem_token_issue");
	scope = text_to_cstring(PG_GETARG_TEXT_PP(0));
	idem_check_length(scope, true);
	idem_require_read_write("idem_token_issue");

	values[0] = PointerGetDatum(PG_GETARG_TEXT_PP(0));
	values[2] = TimestampTzGetDatum(now);
	values[3] = TimestampTzGetDatum(idem_interval_end(fcinfo, 1, "ttl", now));

	token_actor_begin(&actor, fcinfo->flinfo->fn_oid, scope);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	for (;;)
	{
		MemoryContext spi = MemoryContextSwitchTo(caller);

		token = random_token();
		MemoryContextSwitchTo(spi);
		values[1] = CStringGetTextDatum(token);
		/* a collision of 128 random bits does not happen; if it did, redraw */
		if (token_exec(fcinfo->flinfo->fn_oid, TOKEN_PLAN_INSERT, values,
					   SPI_OK_INSERT) == 1)
			break;
		CHECK_FOR_INTERRUPTS();
	}
	SPI_finish();
	idem_actor_end(&actor);
	idem_count(IDEM_COUNT_TOKENS_ISSUED);

	PG_RETURN_TEXT_P(cstring_to_text(token));
}

/*
 * idem_token_consume(token text, scope text) RETURNS boolean
 *	  Consume a token in the caller's transaction: true the first time for a
 *	  token issued in scope and not expired; false for an unknown, already
 *	  consumed, expired or other-scope token.  A concurrent consumer waits
 *	  for the first one's transaction and gets false if it commits.  Errors:
 *	  22004 NULL token or scope, 25006 read-only transaction or standby,
 *	  40001 under REPEATABLE READ/SERIALIZABLE
 *	  when another transaction consumed it after the snapshot, 42501 no
 *	  UPDATE privilege on idempotency_token.
 */
PG_FUNCTION_INFO_V1(idem_token_consume);
Datum
idem_token_consume(PG_FUNCTION_ARGS)
{
	Datum		values[3];
	bool		consumed;
	IdemActor	actor;

	idem_require_arg(fcinfo, 0, "token", "idem_token_consume");
	idem_require_arg(fcinfo, 1, "scope", "idem_token_consume");
	idem_require_read_write("idem_token_consume");
	values[0] = PointerGetDatum(PG_GETARG_TEXT_PP(1));
	values[1] = PointerGetDatum(PG_GETARG_TEXT_PP(0));
	values[2] = TimestampTzGetDatum(GetCurrentTimestamp());

	token_actor_begin(&actor, fcinfo->flinfo->fn_oid, text_to_cstring(PG_GETARG_TEXT_PP(1)));
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	consumed = token_exec(fcinfo->flinfo->fn_oid, TOKEN_PLAN_CONSUME, values,
						  SPI_OK_UPDATE) == 1;
	SPI_finish();
	idem_actor_end(&actor);
	idem_count(consumed ? IDEM_COUNT_TOKENS_CONSUMED : IDEM_COUNT_TOKENS_REFUSED);

	PG_RETURN_BOOL(consumed);
}

/*
 * Delete up to batch_size tokens expired at now, for idem_purge; returns
 * how many.
 */
int64
idem_tokens_purge(Oid fn, TimestampTz now, int32 batch_size)
{
	Datum		values[2];
	int64		purged;
	IdemActor	actor;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch_size);
	token_actor_begin(&actor, fn, NULL);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	if (idem_citus_table(idem_extension_relation("idempotency_token", get_func_namespace(fn))))
		purged = idem_purge_by_scope(&token_plans, TOKEN_PLAN_PURGE_SCOPES,
									 TOKEN_PLAN_PURGE_SCOPE, get_func_namespace(fn),
									 now, batch_size);
	else
		purged = (int64) token_exec(fn, TOKEN_PLAN_PURGE, values, SPI_OK_DELETE);
	SPI_finish();
	idem_actor_end(&actor);
	return purged;
}
