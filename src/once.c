/*
 * once.c
 *	  idem_once: message-consumer deduplication.  True the first time a
 *	  (scope, key) is seen, false after, inside the caller's transaction: the
 *	  mark and the message's effects commit or roll back together.
 *
 * The mark is a record of idempotent_record with status succeeded, written
 * by the same compare-and-set claim writes as idem_claim, so a concurrent
 * duplicate waits on the primary key and then answers false (first one
 * committed) or true (first one rolled back).
 */
#include "postgres.h"

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/timestamp.h"

#include "args.h"
#include "idempotency.h"
#include "record_store.h"
#include "stats.h"

/*
 * One attempt; returns -1 when a concurrent transaction changed the record
 * between our read and our write (try again with a new snapshot), else
 * whether this call is the first.
 */
static int
once_attempt(FunctionCallInfo fcinfo, const IdemKey *id, int *hidden)
{
	IdemClaimSpec t = {.status = IDEM_SUCCEEDED};
	IdemRecord	rec;
	int64		new_fence;

	t.now = GetCurrentTimestamp();
	t.expires_at = idem_ttl_end(fcinfo, 2, t.now);

	if (!idem_store_read(id, &rec))
	{
		if (idem_store_insert(id, NULL, &t, NULL))
			return 1;
		/* an insert refused by a record no read sees: retrying would spin */
		if (++*hidden >= 3)
			idem_store_hidden_record_error(id);
		return -1;
	}
	if (!record_expired(&rec, t.now))
		return 0;
	return idem_store_reclaim_expired(id, rec.fence, NULL, &t, &new_fence) ? 1 : -1;
}

/*
 * idem_once(key text, scope text, ttl interval) RETURNS boolean
 *	  True the first time (scope, key) is seen, false while a record of it
 *	  exists (until claim time + ttl, default idempotency.default_ttl).  The
 *	  mark belongs to the caller's transaction.  Errors: 22004 NULL key or
 *	  scope, 22023 empty/over-long key or scope, non-positive ttl, 22008 ttl
 *	  too long, 25006 read-only transaction or standby (for a seen key as
 *	  for a new one); 40001 and 40P01 as for idem_claim.
 */
PG_FUNCTION_INFO_V1(idem_once);
Datum
idem_once(PG_FUNCTION_ARGS)
{
	IdemKey		id = idem_get_key(fcinfo, 0, 1, "idem_once");
	int			first;
	int			hidden = 0;

	(void) idem_ttl_end(fcinfo, 2, GetCurrentTimestamp());	/* check it first */
	idem_require_read_write("idem_once");

	idem_store_begin(fcinfo->flinfo->fn_oid, false, id.scope);
	while ((first = once_attempt(fcinfo, &id, &hidden)) < 0)
		CHECK_FOR_INTERRUPTS();
	idem_store_end();

	idem_count(first ? IDEM_COUNT_CLAIMS : IDEM_COUNT_REPLAYS);
	/* a delivery refused: counted now, as the consumer rolls back after it */
	if (!first)
		idem_count(IDEM_COUNT_INBOX_DUPLICATES);
	PG_RETURN_BOOL(first == 1);
}
