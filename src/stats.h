/*
 * stats.h
 *	  Counters per database (stats.c, the idempotency_stats view), in
 *	  shared memory when the library is in shared_preload_libraries;
 *	  without it idem_count is a no-op.  Keep the order in step with the
 *	  OUT columns of idem_stats() and idem_messaging_stats() in the
 *	  install scripts.
 */
#ifndef IDEMPOTENCY_STATS_H
#define IDEMPOTENCY_STATS_H

#include "datatype/timestamp.h"

typedef enum IdemCounter
{
	IDEM_COUNT_CLAIMS,			/* idem_claim answered claimed, idem_once true */
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
	/* messaging, from 1.4: idem_messaging_stats(), not idem_stats() */
	IDEM_COUNT_OUTBOX_ENQUEUED, /* enqueues committed */
	IDEM_COUNT_OUTBOX_SENT,		/* messages marked sent, committed */
	IDEM_COUNT_OUTBOX_SEND_LAG_US,	/* their sent_at - created_at, in us */
	IDEM_COUNT_INBOX_DUPLICATES,	/* idem_once answered false */
	IDEM_NUM_COUNTERS
} IdemCounter;

/* the counters idem_stats() returns (its 1.0 columns): those before messaging */
#define IDEM_NUM_STATS_COUNTERS IDEM_COUNT_OUTBOX_ENQUEUED

/*
 * What a duplicate waited for (README "idempotency_stats"): another
 * transaction's write of the same key (a claim write that lost to it,
 * counted in waits), or an outcome under wait_for_outcome (outcome_waits).
 * Both add the wait's time to the wait_seconds histogram.
 */
typedef enum IdemWaitKind
{
	IDEM_WAIT_KEY,
	IDEM_WAIT_OUTCOME
} IdemWaitKind;

extern int	idem_stats_databases;	/* slots of the shared counters */

extern void idem_stats_init(void);
extern void idem_count(IdemCounter c);
extern void idem_count_n(IdemCounter c, uint64 n);
extern bool idem_stats_slot_ready(void);
extern void idem_count_at_commit(IdemCounter c, uint64 n);
extern void idem_stats_commit_register_callbacks(void);
extern void idem_stats_wait_ended(IdemWaitKind kind, TimestampTz started);

#endif							/* IDEMPOTENCY_STATS_H */
