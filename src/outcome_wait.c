/*
 * outcome_wait.c
 *	  Waiting for the outcome of a key held by a lease (idem_claim's
 *	  wait_for_outcome): the waiter sleeps on a condition variable in shared
 *	  memory and the transaction that records an outcome or releases the key
 *	  wakes it when it commits, so nobody polls the table.
 *
 * The condition variables are a fixed array; a key maps to one of them by a
 * hash of (scope, key).  Keys that share one wake each other's waiters,
 * which then read their record again and sleep on: a wakeup is a hint, the
 * record is the answer.  Each variable has a generation, which a commit
 * advances before it broadcasts: a waiter reads the generation before it
 * reads its record and sleeps only while the generation is unchanged, so a
 * commit between the two is never missed (the read runs in a subtransaction
 * whose rollback leaves the variable's wait list).  The array exists only when the library is in
 * shared_preload_libraries; without it a wait is refused with 55000.
 *
 * A transaction remembers which variables to wake and wakes them after it
 * committed (XACT_EVENT_COMMIT comes after the commit is visible to other
 * snapshots), never when it aborts.  An outcome committed by COMMIT PREPARED
 * wakes nobody: its waiters see it at the end of the lease or of their bound.
 */
#include "postgres.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "port/atomics.h"
#include "storage/condition_variable.h"
#include "utils/timestamp.h"

#include "idempotency.h"
#include "outcome_wait.h"
#include "shmem_blocks.h"

#define OUTCOME_WAIT_SLOTS 128

typedef struct OutcomeWaitShared
{
	ConditionVariable slots[OUTCOME_WAIT_SLOTS];
	pg_atomic_uint64 generation[OUTCOME_WAIT_SLOTS];
} OutcomeWaitShared;

/* NULL unless the library was preloaded */
static OutcomeWaitShared *outcome_wait_shared = NULL;

/* slots this transaction wakes when it commits */
static uint64 slots_to_wake[OUTCOME_WAIT_SLOTS / 64];
static bool wake_pending = false;

static void
outcome_wait_shmem_init(void *block)
{
	OutcomeWaitShared *shared = block;

	for (int i = 0; i < OUTCOME_WAIT_SLOTS; i++)
	{
		ConditionVariableInit(&shared->slots[i]);
		pg_atomic_init_u64(&shared->generation[i], 0);
	}
}

/* The slot of (scope, key): the scope's length keeps "a"+"bc" apart from "ab"+"c" */
static int
slot_of(const IdemKey *id)
{
	uint32		h = hash_bytes((const unsigned char *) id->key, strlen(id->key));

	h = hash_combine(h, hash_bytes((const unsigned char *) id->scope,
								   strlen(id->scope)));
	h = hash_combine(h, (uint32) strlen(id->scope));
	return h % OUTCOME_WAIT_SLOTS;
}

static void
outcome_wait_xact_callback(XactEvent event, void *arg)
{
	if (!wake_pending)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PARALLEL_COMMIT)
	{
		for (int i = 0; i < OUTCOME_WAIT_SLOTS; i++)
			if (slots_to_wake[i / 64] & (UINT64CONST(1) << (i % 64)))
			{
				pg_atomic_fetch_add_u64(&outcome_wait_shared->generation[i], 1);
				ConditionVariableBroadcast(&outcome_wait_shared->slots[i]);
			}
	}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_ABORT &&
			 event != XACT_EVENT_PREPARE)
		return;
	memset(slots_to_wake, 0, sizeof(slots_to_wake));
	wake_pending = false;
}

/*
 * Called from _PG_init: the shared array when the library is being
 * preloaded, and the commit callback that wakes waiters.
 */
void
idem_outcome_wait_init(void)
{
	RegisterXactCallback(outcome_wait_xact_callback, NULL);
	idem_shmem_register("idempotency outcome waits", sizeof(OutcomeWaitShared),
						outcome_wait_shmem_init, (void **) &outcome_wait_shared);
}

/* 55000 unless the library was preloaded, so that waits can be woken */
void
idem_outcome_wait_require(void)
{
	if (outcome_wait_shared == NULL)
		ereport(ERROR,
				errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
				errmsg("wait_for_outcome needs the idempotency library preloaded"),
				errdetail("The library was not loaded through shared_preload_libraries, so the server has no shared memory to wake a waiting claim."),
				errhint("Add idempotency to shared_preload_libraries in postgresql.conf and restart the server, or retry after retry_after instead of waiting."));
}

/*
 * The current transaction recorded an outcome for id, or released it:
 * wake the waiters of id when the transaction commits.  A rolled-back
 * subtransaction leaves the mark: the waiters then wake, read, sleep on.
 */
void
idem_outcome_wait_wake_at_commit(const IdemKey *id)
{
	int			slot;

	if (outcome_wait_shared == NULL)
		return;
	slot = slot_of(id);
	slots_to_wake[slot / 64] |= UINT64CONST(1) << (slot % 64);
	wake_pending = true;
}

/* The generation of id's variable: read it before reading the record */
uint64
idem_outcome_wait_generation(const IdemKey *id)
{
	return pg_atomic_read_u64(&outcome_wait_shared->generation[slot_of(id)]);
}

/*
 * Sleep until a transaction that recorded an outcome for a key of id's
 * variable commits after generation was read, until the server clock
 * reaches until, or until interrupted (57014 and the like, raised here).
 */
void
idem_outcome_wait_sleep(const IdemKey *id, uint64 generation, TimestampTz until)
{
	int			slot = slot_of(id);
	ConditionVariable *cv = &outcome_wait_shared->slots[slot];

	ConditionVariablePrepareToSleep(cv);
	while (pg_atomic_read_u64(&outcome_wait_shared->generation[slot]) == generation)
	{
		int64		ms = (until - GetCurrentTimestamp() + 999) / 1000;

		if (ms <= 0 ||
			ConditionVariableTimedSleep(cv, (long) Min(ms, (int64) 60000),
										PG_WAIT_EXTENSION))
			break;
	}
	ConditionVariableCancelSleep();
}
