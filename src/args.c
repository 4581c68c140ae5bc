/*
 * args.c
 *	  Argument checks shared by the SQL-callable functions: NULLs (22004),
 *	  read-only transactions for the functions that write (25006),
 *	  keys and scopes (22023) and positive intervals (22023, 22008 past the
 *	  timestamp range).  Every check runs before anything is written, so
 *	  bad input changes nothing.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/int128.h"
#include "utils/builtins.h"
#include "utils/timestamp.h"

#include "args.h"
#include "idempotency.h"
#include "key_limit.h"

/* Raise 22004 when argument argno of fn is NULL */
void
idem_require_arg(FunctionCallInfo fcinfo, int argno, const char *argname,
				 const char *fn)
{
	if (PG_ARGISNULL(argno))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("argument \"%s\" of %s must not be null", argname, fn));
}

/*
 * 25006 in a read-only transaction (every transaction of a hot standby is
 * one), for fn, which may write: raised before anything is read, so the
 * answer never depends on the data.
 */
void
idem_require_read_write(const char *fn)
{
	if (XactReadOnly)
		ereport(ERROR,
				errcode(ERRCODE_READ_ONLY_SQL_TRANSACTION),
				errmsg("cannot execute %s in a read-only transaction", fn),
				errdetail("%s may write, so it never runs in a read-only transaction or on a standby, whatever the records hold.", fn),
				errhint("Call it on the primary in a read-write transaction; idem_lookup reads a record anywhere."));
}

/*
 * 22023 when a key (is_scope false) or a scope is longer than
 * idempotency.max_key_length bytes: what the primary key's B-tree must
 * hold is bytes, whatever the characters (init.c bounds the setting so
 * that a key and a scope of that many bytes each always fit)
 */
void
idem_check_length(const char *value, bool is_scope)
{
	size_t		len = strlen(value);

	if (len > (size_t) idem_max_key_length)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				is_scope ?
				errmsg("idempotency scope is too long") :
				errmsg("idempotency key is too long"),
				errdetail("It has %zu bytes; the limit is %d bytes (idempotency.max_key_length).",
						  len, idem_max_key_length),
				errhint("Send a shorter value (a UUID is 36 bytes), or raise idempotency.max_key_length (at most %d).",
						IDEM_MAX_KEY_BYTES));
}

/*
 * The (scope, key) of a call: key at argument key_arg, scope at scope_arg.
 * NULL → 22004; empty key, over-long key or scope → 22023.
 */
IdemKey
idem_get_key(FunctionCallInfo fcinfo, int key_arg, int scope_arg,
			 const char *fn)
{
	IdemKey		id;

	idem_require_arg(fcinfo, key_arg, "key", fn);
	idem_require_arg(fcinfo, scope_arg, "scope", fn);
	id.key = text_to_cstring(PG_GETARG_TEXT_PP(key_arg));
	id.scope = text_to_cstring(PG_GETARG_TEXT_PP(scope_arg));

	if (id.key[0] == '\0')
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("idempotency key must not be empty"),
				errhint("Send a unique key per logical request, for example a UUID."));
	idem_check_length(id.key, false);
	idem_check_length(id.scope, true);
	return id;
}

/*
 * expires_at of a record written at now: now + the ttl at argument argno,
 * or + idempotency.default_ttl when that argument is NULL.
 */
TimestampTz
idem_ttl_end(FunctionCallInfo fcinfo, int argno, TimestampTz now)
{
	if (PG_ARGISNULL(argno))
		return TimestampTzPlusMilliseconds(now, (int64) idem_default_ttl * 1000);
	return idem_interval_end(fcinfo, argno, "ttl", now);
}

/*
 * now + the interval at argument argno, as a fixed duration: the seconds
 * extract(epoch FROM interval) gives (a day is 24 hours, a month 30 days,
 * a year 365.25 days), whatever the session's TimeZone or the calendar.
 * 22023 unless that duration is positive; 22008 when now + it is past
 * the timestamp range.  (A retention computed from it later cannot
 * overflow: see record_kept_until.)
 */
TimestampTz
idem_interval_end(FunctionCallInfo fcinfo, int argno, const char *argname,
				  TimestampTz now)
{
	Interval   *span = PG_GETARG_INTERVAL_P(argno);
	INT128		usecs = int64_to_int128(span->time);
	INT128		zero = int64_to_int128(0);

	/* the terms of interval_part's epoch, in microseconds */
	int128_add_int64_mul_int64(&usecs, span->day, USECS_PER_DAY);
	int128_add_int64_mul_int64(&usecs, span->month / MONTHS_PER_YEAR,
							   (int64) (DAYS_PER_YEAR * 4) * USECS_PER_DAY / 4);
	int128_add_int64_mul_int64(&usecs, span->month % MONTHS_PER_YEAR,
							   DAYS_PER_MONTH * USECS_PER_DAY);
	if (int128_compare(usecs, zero) <= 0)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("%s must be a positive interval", argname),
				errdetail("The %s given is %s.", argname,
						  DatumGetCString(DirectFunctionCall1(interval_out,
															  IntervalPGetDatum(span)))),
				errhint("Pass a duration such as '30 seconds' or '24 hours'."));
	if (int128_compare(usecs, int64_to_int128(IDEM_LAST_TIMESTAMP - now)) > 0)
		ereport(ERROR,
				errcode(ERRCODE_DATETIME_VALUE_OUT_OF_RANGE),
				errmsg("%s is too long", argname),
				errdetail("The %s given is %s; server time + %s must be a valid timestamp.",
						  argname,
						  DatumGetCString(DirectFunctionCall1(interval_out,
															  IntervalPGetDatum(span))),
						  argname),
				errhint("Pass a duration that ends before the year 294277, the end of the timestamp range."));
	return now + int128_to_int64(usecs);
}
