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
 * record is the answer.  The array exists only when the library is in
 * shared_preload_libraries; without it a wait is refused with 55000.
 *
 * A transaction remembers which variables to wake and wakes them after it
 * committed (XACT_EVENT_COMMIT comes after the commit is visible to other
 * snapshots), never when it aborts.  An outcome committed by COMMIT PREPARED
 * wakes nobody: its waiters see it at the end of the lease or of their bound.
 */
#include "idempotency.h"

#include "access/xact.h"
#include "common/hashfn.h"
#include "miscadmin.h"
#include "pgstat.h"
#include "storage/condition_variable.h"
#include "storage/ipc.h"
#include "storage/lwlock.h"
#include "storage/shmem.h"
#include "utils/timestamp.h"

#define OUTCOME_WAIT_SLOTS 128

typedef struct OutcomeWaitShared
{
	ConditionVariable slots[OUTCOME_WAIT_SLOTS];
} OutcomeWaitShared;

/* NULL unless the library was preloaded */
static OutcomeWaitShared *outcome_wait_shared = NULL;

/* slots this transaction wakes when it commits */
static uint64 slots_to_wake[OUTCOME_WAIT_SLOTS / 64];
static bool wake_pending = false;

static shmem_request_hook_type prev_shmem_request_hook = NULL;
static shmem_startup_hook_type prev_shmem_startup_hook = NULL;

static void
outcome_wait_shmem_request(void)
{
	if (prev_shmem_request_hook)
		prev_shmem_request_hook();
	RequestAddinShmemSpace(MAXALIGN(sizeof(OutcomeWaitShared)));
}

static void
outcome_wait_shmem_startup(void)
{
	bool		found;
	OutcomeWaitShared *shared;

	if (prev_shmem_startup_hook)
		prev_shmem_startup_hook();

	LWLockAcquire(AddinShmemInitLock, LW_EXCLUSIVE);
	shared = ShmemInitStruct("idempotency outcome waits",
							 sizeof(OutcomeWaitShared), &found);
	if (!found)
		for (int i = 0; i < OUTCOME_WAIT_SLOTS; i++)
			ConditionVariableInit(&shared->slots[i]);
	LWLockRelease(AddinShmemInitLock);
	outcome_wait_shared = shared;
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
				ConditionVariableBroadcast(&outcome_wait_shared->slots[i]);
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
outcome_wait_init(void)
{
	RegisterXactCallback(outcome_wait_xact_callback, NULL);
	if (!process_shared_preload_libraries_in_progress)
		return;
	prev_shmem_request_hook = shmem_request_hook;
	shmem_request_hook = outcome_wait_shmem_request;
	prev_shmem_startup_hook = shmem_startup_hook;
	shmem_startup_hook = outcome_wait_shmem_startup;
}

/* 55000 unless the library was preloaded, so that waits can be woken */
void
outcome_wait_require(void)
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
outcome_wait_wake_at_commit(const IdemKey *id)
{
	int			slot;

	if (outcome_wait_shared == NULL)
		return;
	slot = slot_of(id);
	slots_to_wake[slot / 64] |= UINT64CONST(1) << (slot % 64);
	wake_pending = true;
}

/*
 * Sleep until a transaction that recorded an outcome for a key of id's
 * slot commits, until the server clock reaches until, or until
 * interrupted.  The first call of a wait only prepares it and returns at
 * once, so that the caller reads the record once more after joining the
 * wait list: no commit between that read and the sleep is missed.
 */
void
outcome_wait_sleep(const IdemKey *id, TimestampTz until)
{
	ConditionVariable *cv = &outcome_wait_shared->slots[slot_of(id)];
	long		ms = 1 + (long) Min((until - GetCurrentTimestamp()) / 1000, (int64) 60000);

	(void) ConditionVariableTimedSleep(cv, Max(ms, 1), PG_WAIT_EXTENSION);
}

/* Leave the wait list; call after the last outcome_wait_sleep */
void
outcome_wait_end(void)
{
	ConditionVariableCancelSleep();
}
