/*
 * stats_commit.c
 *	  Counters that count what a transaction committed: the outbox's
 *	  enqueues and sent marks (README, idempotency_stats).  Counts wait here,
 *	  per subtransaction, until the transaction commits or is prepared; a
 *	  rollback, of the transaction or of the subtransaction that counted
 *	  them, forgets them, as it forgets the rows they count.
 */
#include "postgres.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"

#include "stats.h"

/* What one subtransaction counted */
typedef struct PendingCounts
{
	SubTransactionId subid;
	uint64		n[IDEM_NUM_COUNTERS];
} PendingCounts;

/* PendingCounts, oldest first, in TopTransactionContext; NIL when none */
static List *pending = NIL;

/*
 * Add n to counter c when the current transaction commits (or is
 * prepared), unless the current subtransaction rolls back first.  A
 * no-op without shared counters; the database's slot is taken now, while
 * the catalog may be read, so that the commit only adds.
 */
void
idem_count_at_commit(IdemCounter c, uint64 n)
{
	PendingCounts *counts = pending == NIL ? NULL : llast(pending);
	SubTransactionId subid = GetCurrentSubTransactionId();

	if (n == 0 || !idem_stats_slot_ready())
		return;
	if (counts == NULL || counts->subid != subid)
	{
		MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

		counts = palloc0(sizeof(PendingCounts));
		counts->subid = subid;
		pending = lappend(pending, counts);
		MemoryContextSwitchTo(old);
	}
	counts->n[c] += n;
}

static void
stats_commit_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;

	if (pending == NIL)
		return;
	if (event == XACT_EVENT_COMMIT || event == XACT_EVENT_PREPARE)
	{
		foreach(lc, pending)
		{
			PendingCounts *counts = lfirst(lc);

			for (int c = 0; c < IDEM_NUM_COUNTERS; c++)
				idem_count_n((IdemCounter) c, counts->n[c]);
		}
	}
	else if (event != XACT_EVENT_ABORT && event != XACT_EVENT_PARALLEL_COMMIT &&
			 event != XACT_EVENT_PARALLEL_ABORT)
		return;
	/* the list lives in TopTransactionContext, which goes now */
	pending = NIL;
}

static void
stats_commit_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
							  SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	foreach(lc, pending)
	{
		PendingCounts *counts = lfirst(lc);

		if (counts->subid != mySubid)
			continue;
		if (event == SUBXACT_EVENT_COMMIT_SUB)
			counts->subid = parentSubid;
		else if (event == SUBXACT_EVENT_ABORT_SUB)
			pending = foreach_delete_current(pending, lc);
	}
}

void
idem_stats_commit_register_callbacks(void)
{
	RegisterXactCallback(stats_commit_xact_callback, NULL);
	RegisterSubXactCallback(stats_commit_subxact_callback, NULL);
}
