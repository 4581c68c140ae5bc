/*
 * xact_claims.c
 *	  The claims that the current transaction holds in-transaction, and the
 *	  commit guard: COMMIT or PREPARE TRANSACTION with a claim that has no
 *	  outcome fails with IK004, so no committed claim is left without one.
 *
 * Subtransactions follow the claim rows: a claim, or an outcome, recorded in
 * a subtransaction that rolls back is forgotten with it.
 *
 * The guard asks about keys, not claims: a newer claim of a key supersedes
 * an older one (the older one was released, or its record was deleted by
 * this transaction), so only the newest claim of each key needs an outcome.
 * Rolling the newer claim back makes the older one the newest again.
 *
 * Each claim also keeps the address of its row version (the TID this
 * transaction wrote it at), which the writes after the claim try before
 * looking the key up.  An address written in a subtransaction that rolls
 * back is forgotten: that version is gone, and its page may be too.
 */
#include "postgres.h"

#include "access/xact.h"
#include "nodes/pg_list.h"
#include "utils/memutils.h"

#include "idempotency.h"
#include "message_text.h"
#include "xact_claims.h"

/* HeldClaim pointers, in TopTransactionContext; NIL outside a transaction */
static List *held_claims = NIL;

void
idem_claims_add(const IdemKey *id, int64 fence, const IdemRowAddress *row)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);
	HeldClaim  *claim = palloc(sizeof(HeldClaim));

	claim->scope = pstrdup(id->scope);
	claim->key = pstrdup(id->key);
	claim->fence = fence;
	claim->claimed_in = GetCurrentSubTransactionId();
	claim->finished_in = InvalidSubTransactionId;
	claim->row = *row;
	claim->row_written_in = claim->claimed_in;
	held_claims = lappend(held_claims, claim);
	MemoryContextSwitchTo(old);
}

/*
 * The newest claim of the key made by this transaction, finished or not;
 * NULL if none.  Newest first, because a key can be claimed again in the
 * same transaction (see above).
 */
static HeldClaim *
newest_claim(const char *scope, const char *key)
{
	for (int i = list_length(held_claims) - 1; i >= 0; i--)
	{
		HeldClaim  *claim = list_nth(held_claims, i);

		if (strcmp(claim->key, key) == 0 && strcmp(claim->scope, scope) == 0)
			return claim;
	}
	return NULL;
}

/* The claim of id that counts: its newest */
HeldClaim *
idem_claims_find(const IdemKey *id)
{
	return newest_claim(id->scope, id->key);
}

void
idem_claims_mark_finished(HeldClaim *claim)
{
	claim->finished_in = GetCurrentSubTransactionId();
}

/*
 * The claim's row address, for a write of this subtransaction that may
 * move it (a new version) or forget it
 */
IdemRowAddress *
idem_claims_row(HeldClaim *claim)
{
	claim->row_written_in = GetCurrentSubTransactionId();
	return &claim->row;
}

static void
claims_xact_callback(XactEvent event, void *arg)
{
	ListCell   *lc;
	HeldClaim  *open = NULL;
	int			nopen = 0;

	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
		case XACT_EVENT_PRE_PREPARE:
			foreach(lc, held_claims)
			{
				HeldClaim  *claim = lfirst(lc);

				if (claim->finished_in == InvalidSubTransactionId &&
					newest_claim(claim->scope, claim->key) == claim)
				{
					if (open == NULL)
						open = claim;
					nopen++;
				}
			}
			if (open != NULL)
				ereport(ERROR,
						errcode(ERRCODE_IDEM_UNFINISHED_CLAIM),
						event == XACT_EVENT_PRE_COMMIT ?
						errmsg("cannot commit a transaction with an unfinished idempotency claim") :
						errmsg("cannot prepare a transaction with an unfinished idempotency claim"),
						errdetail_plural("Key \"%s\" in scope \"%s\" was claimed in this transaction without an outcome (%d such claim).",
										 "Key \"%s\" in scope \"%s\" was claimed in this transaction without an outcome (%d such claims).",
										 nopen, idem_message_value(open->key), idem_message_value(open->scope), nopen),
						errhint("Call idem_finish or idem_fail for every key claimed in the transaction before it ends; this transaction has been rolled back."));
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
			/* the list lives in TopTransactionContext, which goes now */
			held_claims = NIL;
			break;
		default:
			break;
	}
}

static void
claims_subxact_callback(SubXactEvent event, SubTransactionId mySubid,
						SubTransactionId parentSubid, void *arg)
{
	ListCell   *lc;

	switch (event)
	{
		case SUBXACT_EVENT_COMMIT_SUB:
			foreach(lc, held_claims)
			{
				HeldClaim  *claim = lfirst(lc);

				if (claim->claimed_in == mySubid)
					claim->claimed_in = parentSubid;
				if (claim->finished_in == mySubid)
					claim->finished_in = parentSubid;
				if (claim->row_written_in == mySubid)
					claim->row_written_in = parentSubid;
			}
			break;
		case SUBXACT_EVENT_ABORT_SUB:
			foreach(lc, held_claims)
			{
				HeldClaim  *claim = lfirst(lc);

				if (claim->claimed_in == mySubid)
				{
					held_claims = foreach_delete_current(held_claims, lc);
					continue;
				}
				if (claim->finished_in == mySubid)
					claim->finished_in = InvalidSubTransactionId;
				if (claim->row_written_in == mySubid)
					claim->row.relid = InvalidOid;
			}
			break;
		default:
			break;
	}
}

void
idem_claims_register_callbacks(void)
{
	RegisterXactCallback(claims_xact_callback, NULL);
	RegisterSubXactCallback(claims_subxact_callback, NULL);
}
