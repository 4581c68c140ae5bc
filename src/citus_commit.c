/*
 * citus_commit.c
 *	  The commit guard's refusal on another node of a Citus cluster,
 *	  answered as IK004 on the node the client is connected to.
 *
 * A function that Citus delegates to the node holding the tenant's shard
 * (create_distributed_function, docs/citus.md) claims a key there, and the
 * commit guard of that node refuses the commit when the claim has no
 * outcome.  When that node is the only one the transaction wrote on
 * another node, Citus sends it COMMIT from its own pre-commit callback,
 * reports the refusal as a WARNING that carries the remote SQLSTATE, and
 * then fails the commit with XX000 "could not commit transaction for
 * shard ...": nothing commits, but a handler's bug looks like a lost node.
 * This node sees both messages go out: a WARNING with SQLSTATE IK004 from
 * a remote command during this node's commit, then an XX000 error of the
 * same commit, is answered as the refusal it is, IK004 with the remote
 * node's message, detail and hint (Citus's message added to the detail).
 * With two-phase commit Citus raises the remote IK004 as the error itself.
 *
 * The messages are seen through emit_log_hook, which runs for the messages
 * the server logs: with log_min_messages above warning the WARNING is not
 * seen and the client gets Citus's XX000 (docs/citus.md, Limits).
 */
#include "postgres.h"

#include "access/xact.h"
#include "utils/elog.h"
#include "utils/memutils.h"

#include "citus.h"
#include "idempotency.h"

/* what Citus adds to the context of an error it relays from another node */
#define CITUS_REMOTE_CONTEXT "while executing command on "

typedef struct RemoteRefusal
{
	char	   *message;
	char	   *detail;
	char	   *hint;
} RemoteRefusal;

static emit_log_hook_type prev_emit_log_hook = NULL;
static bool committing = false;
static RemoteRefusal *refusal = NULL;	/* in TopTransactionContext */

static char *
copy_or_null(const char *s)
{
	return s == NULL ? NULL : pstrdup(s);
}

static void
remember_refusal(const ErrorData *edata)
{
	MemoryContext old = MemoryContextSwitchTo(TopTransactionContext);

	refusal = palloc(sizeof(RemoteRefusal));
	refusal->message = copy_or_null(edata->message);
	refusal->detail = copy_or_null(edata->detail);
	refusal->hint = copy_or_null(edata->hint);
	MemoryContextSwitchTo(old);
}

/* Turn Citus's commit failure into the refusal (strings in edata's context) */
static void
answer_as_refusal(ErrorData *edata)
{
	edata->sqlerrcode = ERRCODE_IDEM_UNFINISHED_CLAIM;
	edata->detail = refusal->detail == NULL ?
		psprintf("Citus: %s.", edata->message) :
		psprintf("%s Citus: %s.", refusal->detail, edata->message);
	edata->message = pstrdup(refusal->message);
	edata->hint = copy_or_null(refusal->hint);
}

static void
commit_log_hook(ErrorData *edata)
{
	if (committing)
	{
		if (edata->elevel == WARNING &&
			edata->sqlerrcode == ERRCODE_IDEM_UNFINISHED_CLAIM &&
			edata->context != NULL &&
			strstr(edata->context, CITUS_REMOTE_CONTEXT) != NULL &&
			refusal == NULL)
			remember_refusal(edata);
		else if (edata->elevel == ERROR &&
				 edata->sqlerrcode == ERRCODE_INTERNAL_ERROR &&
				 refusal != NULL)
			answer_as_refusal(edata);
	}
	if (prev_emit_log_hook)
		prev_emit_log_hook(edata);
}

/*
 * Registered after citus's callback (the preload order), this one sees the
 * commit first: it marks the time in which Citus commits on the other nodes.
 */
static void
commit_xact_callback(XactEvent event, void *arg)
{
	switch (event)
	{
		case XACT_EVENT_PRE_COMMIT:
			committing = true;
			refusal = NULL;
			break;
		case XACT_EVENT_COMMIT:
		case XACT_EVENT_ABORT:
		case XACT_EVENT_PREPARE:
		case XACT_EVENT_PARALLEL_COMMIT:
		case XACT_EVENT_PARALLEL_ABORT:
			committing = false;
			refusal = NULL;
			break;
		default:
			break;
	}
}

void
idem_citus_commit_init(void)
{
	prev_emit_log_hook = emit_log_hook;
	emit_log_hook = commit_log_hook;
	RegisterXactCallback(commit_xact_callback, NULL);
}
