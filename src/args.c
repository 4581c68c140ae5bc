/*
 * args.c
 *	  Argument checks shared by the SQL-callable functions: NULLs (22004),
 *	  keys and scopes (22023) and positive intervals (22023).  Every check
 *	  runs before anything is written, so bad input changes nothing.
 */
#include "idempotency.h"

#include "mb/pg_wchar.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

static const Interval zero_interval = {0, 0, 0};

/* Raise 22004 when argument argno of fn is NULL */
void
require_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
			const char *fn)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"%s\" of %s must not be null", argname, fn));
}

/* 22023 when a key or scope is longer than idempotency.max_key_length */
void
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
IdemKey
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

/*
 * expires_at of a record written at now: now + the ttl at argument argno,
 * or + idempotency.default_ttl when that argument is NULL.
 */
TimestampTz
ttl_end(FunctionCallInfo fcinfo, int argno, TimestampTz now)
{
	if (PG_ARGISNULL(argno))
		return TimestampTzPlusMilliseconds(now, (int64) idem_default_ttl * 1000);
	return interval_end(fcinfo, argno, "ttl", now);
}

/*
 * now + the interval at argument argno, which must be positive both as an
 * interval ('1 month -30 days' is not, whatever the date) and on the
 * calendar from now; 22023 otherwise, 22008 past the timestamp range.
 */
TimestampTz
interval_end(FunctionCallInfo fcinfo, int argno, const char *argname,
			 TimestampTz now)
{
	Interval   *span = PG_GETARG_INTERVAL_P(argno);
	TimestampTz end;

	end = DatumGetTimestampTz(DirectFunctionCall2(timestamptz_pl_interval,
												  TimestampTzGetDatum(now),
												  IntervalPGetDatum(span)));
	if (DatumGetBool(DirectFunctionCall2(interval_le, IntervalPGetDatum(span),
										 IntervalPGetDatum(&zero_interval))) ||
		end <= now)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s must be a positive interval", argname),
				errdetail("The %s given is %s.", argname,
						  DatumGetCString(DirectFunctionCall1(interval_out,
															  IntervalPGetDatum(span)))),
				errhint("Pass a duration such as '30 seconds' or '24 hours'."));
	return end;
}
