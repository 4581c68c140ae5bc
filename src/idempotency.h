/*
 * idempotency.h
 *	  What the extension's source files share: SQLSTATEs, GUC variables,
 *	  the record store interface (record_store.c) and the registry of
 *	  claims held by the current transaction (xact_claims.c).
 */
#ifndef IDEMPOTENCY_H
#define IDEMPOTENCY_H

#include "postgres.h"

#include "access/htup.h"
#include "common/int.h"
#include "fmgr.h"
#include "datatype/timestamp.h"
#include "executor/spi.h"
#include "utils/jsonb.h"
#include "utils/resowner.h"
#include "utils/tuplestore.h"

#include "compat.h"

/* SQLSTATEs of the contract (README "SQLSTATE to HTTP"; HTTP mapping in brackets) */
#define ERRCODE_IDEM_FINGERPRINT_MISMATCH	MAKE_SQLSTATE('I','K','0','0','1')	/* 422 */
#define ERRCODE_IDEM_NOT_HELD				MAKE_SQLSTATE('I','K','0','0','2')	/* 409 */
#define ERRCODE_IDEM_STALE_FENCE			MAKE_SQLSTATE('I','K','0','0','3')	/* 409 */
#define ERRCODE_IDEM_UNFINISHED_CLAIM		MAKE_SQLSTATE('I','K','0','0','4')	/* 500 */
#define ERRCODE_IDEM_TRANSITION_NOT_ALLOWED	MAKE_SQLSTATE('I','K','0','0','5')	/* 409 */
#define ERRCODE_IDEM_STALE_VERSION			MAKE_SQLSTATE('I','K','0','0','6')	/* 409 */

/* GUCs, defined in init.c */
extern int	idem_default_ttl;		/* seconds */
extern int	idem_max_key_length;	/* characters */
extern bool idem_direct_access;	/* record_direct.c may serve the store */
extern int	idem_retry_after;		/* milliseconds */

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
 * saved_plans.c: a set of prepared statements on one table of the
 * extension's schema (%1$s in the text is the table, %2$s the schema).
 */
typedef struct SavedPlanDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[8];
} SavedPlanDef;

typedef struct SavedPlans
{
	const char *table;
	const SavedPlanDef *defs;
	int			nplans;
	SPIPlanPtr *plans;			/* [nplans], NULL until prepared */
	Oid			namespace;		/* schema the plans were prepared for */
} SavedPlans;

extern uint64 saved_plan_exec(SavedPlans *set, int id, Oid namespace,
							  Datum *values, const char *nulls, int expected);

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
 * record_store.c: every read and write of idempotent_record goes through
 * these calls, so that planned SQL (which a distributed table can route)
 * and a direct heap/index path (record_direct.c) can both serve them.
 * Calls between store_begin and store_end run with the caller's
 * privileges (SPI is connected when a statement needs it); copied-out
 * values live in the caller's context.
 */
extern void store_begin(Oid extension_function, bool nowait,
						const char *scope);
extern void store_end(void);
extern void store_register_callbacks(void);
extern bool store_read(const IdemKey *id, IdemRecord *rec);
extern bool store_insert(const IdemKey *id, bytea *fingerprint,
						 const IdemClaimSpec *t);
extern bool store_reclaim_expired(const IdemKey *id, int64 seen_fence,
								  bytea *fingerprint, const IdemClaimSpec *t,
								  int64 *new_fence);
extern bool store_take_over(const IdemKey *id, int64 seen_fence,
							bytea *fingerprint, const IdemClaimSpec *t,
							int64 *new_fence);
extern bool store_set_outcome(const IdemKey *id, int64 fence,
							  IdemStatus status, Jsonb *result,
							  TimestampTz now);
extern bool store_release(const IdemKey *id, int64 fence, Jsonb *reason,
						  TimestampTz now);
extern bool store_checkpoint(const IdemKey *id, int64 fence,
							 const char *recovery_point, TimestampTz now);
extern bool store_extend_lease(const IdemKey *id, int64 fence,
							   TimestampTz locked_until, TimestampTz now);
extern int64 store_purge(TimestampTz now, int32 batch_size);

extern bool store_write_would_wait(void);
extern ErrorData *store_subxact_error(MemoryContext context,
									   ResourceOwner owner);
extern IdemStatus idem_status_from_name(const char *name);
extern bool store_write_blocked_by_key(const IdemKey *id, bytea **fingerprint);
extern bool store_probe_uncommitted(const IdemKey *id, bytea **fingerprint);
extern HeapTuple store_lookup(const IdemKey *id, TimestampTz now);
extern void store_pending(TimestampTz at, Tuplestorestate *rows);

/*
 * record_direct.c: the direct heap/index path behind record_store.c, used
 * where it behaves as the SQL does (see there); DIRECT_NOT_USED otherwise.
 */
typedef enum DirectAnswer
{
	DIRECT_NOT_USED = -1,
	DIRECT_NONE = 0,
	DIRECT_FOUND = 1
} DirectAnswer;

extern DirectAnswer direct_read(Oid relid, const IdemKey *id, IdemRecord *rec,
								MemoryContext context);
extern DirectAnswer direct_probe_uncommitted(Oid relid, const IdemKey *id,
											 bytea **fingerprint,
											 MemoryContext context);
extern int64 direct_purge(Oid relid, TimestampTz now, int32 batch_size);
extern DirectAnswer direct_insert(Oid relid, const IdemKey *id,
								  bytea *fingerprint, const IdemClaimSpec *t);
extern DirectAnswer direct_set_outcome(Oid relid, const IdemKey *id,
									   int64 fence, IdemStatus status,
									   Jsonb *result, TimestampTz now);

/* citus.c: Citus tables and the preload order (see there) */
extern bool idem_citus_table(Oid relid);
extern void idem_check_preload_order(void);
extern int64 idem_purge_by_scope(SavedPlans *set, int scopes_plan,
								 int scope_plan, Oid namespace,
								 TimestampTz now, int32 batch_size);

/*
 * delegation.c: invoker mode for a caller that holds privileges on the
 * table, else the scope grants and the table owner's user id.
 */
typedef struct IdemActor
{
	Oid			caller;			/* the calling role */
	bool		delegated;		/* working as the table's owner */
	Oid			save_user;
	int			save_sec;
} IdemActor;

extern void actor_begin(IdemActor *actor, Oid relid, Oid namespace,
						const char *scope);
extern void actor_end(IdemActor *actor);
extern bool scope_permitted(Oid role, Oid namespace, const char *scope);

/* tokens.c: expired single-use tokens, for idem_purge */
extern int64 tokens_purge(Oid fn, TimestampTz now, int32 batch_size);

/* claim.c: an insert met a record that row level security hides */
pg_noreturn extern void idem_hidden_record_error(const IdemKey *id);

/* args.c: argument checks shared by the SQL-callable functions */
extern void require_arg(FunctionCallInfo fcinfo, int argno,
						const char *argname, const char *fn);
extern IdemKey get_idem_key(FunctionCallInfo fcinfo, int key_arg,
							int scope_arg, const char *fn);
extern void check_length(const char *what, const char *value);
extern void require_read_write(const char *fn);
extern TimestampTz interval_end(FunctionCallInfo fcinfo, int argno,
								const char *argname, TimestampTz now);
extern TimestampTz ttl_end(FunctionCallInfo fcinfo, int argno, TimestampTz now);

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

/*
 * xact_claims.c: in-transaction claims held by this backend's current
 * transaction, and the commit guard that refuses to commit one without an
 * outcome.
 */
typedef struct HeldClaim
{
	char	   *scope;
	char	   *key;
	int64		fence;
	SubTransactionId claimed_in;	/* subtransaction that made the claim */
	SubTransactionId finished_in;	/* ... that recorded the outcome, or
									 * InvalidSubTransactionId while open */
} HeldClaim;

extern void claims_register_callbacks(void);
extern void claims_add(const IdemKey *id, int64 fence);
extern HeldClaim *claims_find(const IdemKey *id);
extern void claims_mark_finished(HeldClaim *claim);

/*
 * stats.c: cluster-wide counters (the idempotency_stats view), in shared
 * memory when the library is in shared_preload_libraries; without it
 * idem_count is a no-op.  Keep the order in step with the OUT columns of
 * idem_stats() in the install script.
 */
typedef enum IdemCounter
{
	IDEM_COUNT_CLAIMS,			/* idem_claim answered claimed, idem_once
								 * true */
	IDEM_COUNT_REPLAYS,			/* ... replay, idem_once false */
	IDEM_COUNT_IN_PROGRESS,		/* ... in_progress */
	IDEM_COUNT_WAITS,			/* a claim's write waited for another
								 * transaction's write of the same key */
	IDEM_COUNT_FINGERPRINT_MISMATCHES,	/* IK001 raised */
	IDEM_COUNT_TAKEOVERS,		/* abandoned in-progress claim taken over */
	IDEM_COUNT_STALE_FENCES,	/* IK003 raised */
	IDEM_COUNT_FAILURES,		/* idem_fail recorded (final or retryable) */
	IDEM_COUNT_TOKENS_ISSUED,
	IDEM_COUNT_TOKENS_CONSUMED,
	IDEM_COUNT_TOKENS_REFUSED,
	IDEM_COUNT_ROWS_PURGED,		/* records and tokens deleted by purge */
	IDEM_NUM_COUNTERS
} IdemCounter;

extern void stats_init(void);

/*
 * outcome_wait.c: a claim of a key held by a lease may wait for its outcome
 * (idem_claim's wait_for_outcome); outcome writers wake it at commit.
 */
extern void outcome_wait_init(void);
extern void outcome_wait_require(void);
extern void outcome_wait_wake_at_commit(const IdemKey *id);
extern uint64 outcome_wait_generation(const IdemKey *id);
extern void outcome_wait_sleep(const IdemKey *id, uint64 generation,
							   TimestampTz until);
extern void idem_count(IdemCounter c);
extern void idem_count_n(IdemCounter c, uint64 n);

#endif							/* IDEMPOTENCY_H */
