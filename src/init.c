/*
 * init.c
 *	  Module initialisation: the idempotency.* GUCs, the transaction
 *	  callbacks (commit guard, record store), and the shared memory of the
 *	  counters and of wait_for_outcome when the library is preloaded.
 */
#include "postgres.h"

#include <limits.h>

#include "fmgr.h"
#include "miscadmin.h"
#include "utils/guc.h"

#include "citus.h"
#include "idempotency.h"
#include "key_limit.h"
#include "outcome_wait.h"
#include "record_store.h"
#include "stats.h"
#include "xact_claims.h"

PG_MODULE_MAGIC;

int			idem_default_ttl = 86400;
int			idem_max_key_length = 255;
bool		idem_direct_access = true;
int			idem_retry_after = 1000;

/* README's settings table gives the maximum for 8 kB pages */
StaticAssertDecl(BLCKSZ != 8192 || IDEM_MAX_KEY_BYTES == 1342,
				 "the largest idempotency.max_key_length on 8 kB pages is 1342 bytes");

void		_PG_init(void);

void
_PG_init(void)
{
	/* before anything is registered: an error stops the server */
	idem_check_preload_order();

	DefineCustomIntVariable("idempotency.default_ttl",
							"Sets the default time to live of an idempotency record.",
							"Used when idem_claim is called without ttl. A claim treats a record as absent once its claim time plus its ttl has passed.",
							&idem_default_ttl,
							86400, 1, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_S,
							NULL, NULL, NULL);

	DefineCustomIntVariable("idempotency.max_key_length",
							"Sets the maximum length of an idempotency key or scope, in bytes.",
							"A key and a scope of the maximum each always fit in the primary key's index entry.",
							&idem_max_key_length,
							255, 1, IDEM_MAX_KEY_BYTES,
							PGC_USERSET,
							0,
							NULL, NULL, NULL);

	DefineCustomBoolVariable("idempotency.direct_access",
							 "Enables the direct heap and index path for idempotent_record.",
							 "When off, every access to idempotent_record runs planned SQL. When on, the direct path serves only where it gives the planned SQL's answers: a plain local heap table, and no executor permission hook (such as pgaudit's) loaded.",
							 &idem_direct_access,
							 true,
							 PGC_USERSET,
							 0,
							 NULL, NULL, NULL);

	DefineCustomIntVariable("idempotency.retry_after",
							"Sets the retry interval suggested to a duplicate of a claim in progress.",
							"idem_claim returns it as retry_after of an in_progress answer, or the lease time left when that is shorter.",
							&idem_retry_after,
							1000, 1, INT_MAX,
							PGC_USERSET,
							GUC_UNIT_MS,
							NULL, NULL, NULL);

	/* a server start setting: it exists where the library is preloaded */
	if (process_shared_preload_libraries_in_progress)
		DefineCustomIntVariable("idempotency.stats_databases",
								"Sets the number of databases the idempotency counters are kept for.",
								"A database takes one at its first counted call or read of idempotency_stats, and keeps it until the server stops or the database is dropped; calls in a database that finds none are not counted, and its idempotency_stats raises an error.",
								&idem_stats_databases,
								64, 1, 10000,
								PGC_POSTMASTER,
								0,
								NULL, NULL, NULL);

	MarkGUCPrefixReserved("idempotency");

	idem_claims_register_callbacks();
	idem_store_register_callbacks();	/* nested store brackets, table lookup */
	idem_stats_init();			/* shared counters, when preloaded */
	idem_stats_commit_register_callbacks(); /* counts of committed work */
	idem_outcome_wait_init();	/* wakeups of wait_for_outcome, when preloaded */
	idem_citus_commit_init();	/* IK004 refused on another Citus node */
}
