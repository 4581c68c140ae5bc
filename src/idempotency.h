/*
 * idempotency.h
 *	  What every part of the extension shares: the SQLSTATEs, the GUC
 *	  variables, a record's key and row, and the rule of when a record
 *	  expires.  Each subsystem has a header of its own.
 */
#ifndef IDEMPOTENCY_H
#define IDEMPOTENCY_H

#include "common/int.h"
#include "datatype/timestamp.h"
#include "storage/itemptr.h"
#include "utils/jsonb.h"

/*
 * 18 replaced pg_attribute_noreturn() (after the declarator) by a prefix;
 * the one version difference outside compat.h, because the shared
 * declarations need it
 */
#ifndef pg_noreturn
#define pg_noreturn pg_attribute_noreturn()
#endif

/* SQLSTATEs of the contract (README "SQLSTATE to HTTP"; HTTP mapping in brackets) */
#define ERRCODE_IDEM_FINGERPRINT_MISMATCH	MAKE_SQLSTATE('I','K','0','0','1')	/* 422 */
#define ERRCODE_IDEM_NOT_HELD				MAKE_SQLSTATE('I','K','0','0','2')	/* 409 */
#define ERRCODE_IDEM_STALE_FENCE			MAKE_SQLSTATE('I','K','0','0','3')	/* 409 */
#define ERRCODE_IDEM_UNFINISHED_CLAIM		MAKE_SQLSTATE('I','K','0','0','4')	/* 500 */
#define ERRCODE_IDEM_TRANSITION_NOT_ALLOWED	MAKE_SQLSTATE('I','K','0','0','5')	/* 409 */
#define ERRCODE_IDEM_STALE_VERSION			MAKE_SQLSTATE('I','K','0','0','6')	/* 409 */

/* GUCs, defined in init.c */
extern int	idem_default_ttl;	/* seconds */
extern int	idem_max_key_length;	/* bytes, at most IDEM_MAX_KEY_BYTES */
extern bool idem_direct_access; /* record_direct.c may serve the store */
extern int	idem_retry_after;	/* milliseconds */

/* Record status: same labels as the SQL enum idem_status */
typedef enum IdemStatus
{
	IDEM_IN_PROGRESS,
	IDEM_SUCCEEDED,
	IDEM_FAILED,
	IDEM_UNKNOWN
} IdemStatus;

extern const char *const idem_status_names[];

/* A record's identity */
typedef struct IdemKey
{
	const char *scope;
	const char *key;
} IdemKey;

/* One idempotent_record row, copied out of the store */
typedef struct IdemRecord
{
	IdemStatus	status;
	bytea	   *fingerprint;	/* NULL when none stored */
	Jsonb	   *result;			/* NULL until finished */
	char	   *recovery_point; /* NULL when none saved */
	int64		fence;
	bool		has_lease;		/* locked_until is not NULL */
	TimestampTz locked_until;
	TimestampTz expires_at;		/* claim time + ttl */
	TimestampTz created_at;
	TimestampTz updated_at;		/* of a final record: the outcome's time */
} IdemRecord;

/*
 * Where this transaction wrote a claim's row version: the table (and its
 * storage, which TRUNCATE or a rewrite replaces) and the version's TID.
 * A hint for the writes that follow the claim (record_direct.c): they take
 * it only after proving it still holds the claim's row, else they look
 * the key up.  relid InvalidOid: unknown.
 */
typedef struct IdemRowAddress
{
	Oid			relid;
	Oid			relfilenode;
	ItemPointerData tid;
} IdemRowAddress;

/*
 * The last valid timestamptz.  A ttl or lease must end by it (args.c); a
 * retention that would end past it ends at it (record_kept_until).
 */
#define IDEM_LAST_TIMESTAMP (END_TIMESTAMP - 1)

/* What a claim writes; the times from one reading of the server clock */
typedef struct IdemClaimSpec
{
	IdemStatus	status;			/* in_progress; succeeded for idem_once */
	TimestampTz now;
	TimestampTz expires_at;		/* now + ttl */
	bool		leased;
	TimestampTz locked_until;	/* now + lease, when leased */
} IdemClaimSpec;

/*
 * record_kept_until: until when a record answers duplicates.  expires_at is
 * the claim's (claim time + ttl) and is not moved by a final outcome, so
 * that recording one changes no indexed column (a HOT update).  A final outcome
 * (succeeded, failed) is kept at least its retention (expires_at -
 * created_at, exact microseconds: the ttl, or more after a takeover) after
 * it was recorded (updated_at), ending at the last valid timestamp rather
 * than past it.  record_store.c's EXPIRED() says the same in SQL.
 */
static inline TimestampTz
record_kept_until(IdemStatus status, TimestampTz expires_at,
				  TimestampTz created_at, TimestampTz updated_at)
{
	int64		kept_for;
	TimestampTz end;

	if (status != IDEM_SUCCEEDED && status != IDEM_FAILED)
		return expires_at;
	if (pg_sub_s64_overflow(expires_at, created_at, &kept_for))
		return expires_at > created_at ? IDEM_LAST_TIMESTAMP : expires_at;
	if (pg_add_s64_overflow(updated_at, kept_for, &end) || end > IDEM_LAST_TIMESTAMP)
		end = kept_for > 0 ? IDEM_LAST_TIMESTAMP : expires_at;
	return Max(expires_at, end);
}

/*
 * record_expired: the rule of record_store.c's EXPIRED() in C.  An expired
 * record counts as absent; one awaiting reconciliation (unknown) or under a
 * live lease never expires.
 */
static inline bool
record_expired(const IdemRecord *rec, TimestampTz now)
{
	return record_kept_until(rec->status, rec->expires_at, rec->created_at,
							 rec->updated_at) <= now &&
		rec->status != IDEM_UNKNOWN &&
		!(rec->has_lease && rec->locked_until > now);
}

#endif							/* IDEMPOTENCY_H */
