/*
 * delegation.c
 *	  Least privilege.  A role that holds privileges on the extension's
 *	  tables uses the functions as before, with its own privileges and row
 *	  level security (invoker mode).  A role that holds none is checked
 *	  against the scope grants (idem_scope_grant) before anything is read,
 *	  locked or waited for, and the function then does its table work as
 *	  the table's owner (delegated mode), the way pg_cron writes its job table: the
 *	  user id is switched with SECURITY_LOCAL_USERID_CHANGE and
 *	  SECURITY_RESTRICTED_OPERATION and switched back at the end of the
 *	  call, or by the (sub)transaction's abort.  Such a role can then only
 *	  do what the functions do: it cannot forge a fence, rewrite a result,
 *	  plant or delete a record, or reach a scope it was not granted.
 *
 * Every privilege on a table counts (column privileges too): a role that
 * holds any of them stays in invoker mode, where PostgreSQL checks each
 * statement, so no privilege can lead into delegated mode (TRIGGER or
 * REFERENCES would let the role attach code that the owner then runs).
 * Code attached earlier is refused there all the same (attached_code.c):
 * privileges can be revoked after a trigger was made.
 *
 * A grant names a role by its name (it applies to its members, as table
 * privileges do): a name means the same role on every node of a Citus
 * cluster, where each node gives the role an OID of its own.  The name is
 * resolved when a grant is matched, so a role created or renamed later is
 * seen at once.  The pattern is an exact scope, a prefix ('tenant_a:*'), '*' for
 * every scope, or '{setting}', the scope named by a setting that was set
 * for the current transaction only (SET LOCAL, set_config(..., true)): a
 * session-level SET would outlive the request, through a transaction
 * pooler into the next client's.  The grants are cached per backend and
 * the cache is dropped when a statement changes the table (its trigger
 * sends a relcache invalidation, which reaches every backend at commit);
 * each check first takes the invalidations sent since, and a reload reads
 * the table as last committed, also in a transaction whose snapshot is
 * older, so a change binds the next call of every open transaction.
 */
#include "postgres.h"

#include "access/xact.h"
#include "catalog/pg_attribute.h"
#include "catalog/pg_class.h"
#include "catalog/pg_type_d.h"
#include "commands/trigger.h"
#include "executor/spi.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/builtins.h"
#include "utils/guc.h"
#include "utils/guc_tables.h"
#include "utils/inval.h"
#include "utils/lsyscache.h"
#include "utils/memutils.h"
#include "utils/rel.h"
#include "utils/snapmgr.h"
#include "utils/syscache.h"

#include "args.h"
#include "attached_code.h"
#include "compat.h"
#include "delegation.h"
#include "extension_relation.h"
#include "message_text.h"

typedef struct ScopeGrant
{
	char	   *grantee;		/* a role name */
	char	   *pattern;
} ScopeGrant;

/*
 * The grants of grants_table, in schema grants_namespace, valid until its
 * relcache entry is invalidated (a change, a drop)
 */
static List *grants = NIL;
static Oid	grants_table = InvalidOid;
static Oid	grants_namespace = InvalidOid;
static bool grants_valid = false;
static MemoryContext grants_context = NULL;

/*
 * Work as relid's owner, restricted as VACUUM does (no code of anyone else
 * runs with that identity), until SetUserIdAndSecContext(*save_user,
 * *save_sec) or the (sub)transaction's abort.
 */
void
idem_become_table_owner(Oid relid, Oid *save_user, int *save_sec)
{
	HeapTuple	tuple = SearchSysCache1(RELOID, ObjectIdGetDatum(relid));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for relation %u", relid);
	owner = ((Form_pg_class) GETSTRUCT(tuple))->relowner;
	ReleaseSysCache(tuple);
	GetUserIdAndSecContext(save_user, save_sec);
	SetUserIdAndSecContext(owner, *save_sec | SECURITY_LOCAL_USERID_CHANGE |
						   SECURITY_RESTRICTED_OPERATION);
}

static void
grants_relcache_callback(Datum arg, Oid relid)
{
	if (!OidIsValid(relid) || relid == grants_table)
		grants_valid = false;
}

/*
 * Read idem_scope_grant of the extension's schema, as its owner, as last
 * committed.  A trigger another role attached to it could have forged
 * grants when they were written: then none is trusted.
 */
static void
load_grants(Oid namespace)
{
	Oid			relid = idem_extension_relation("idem_scope_grant", namespace);
	Oid			save_user;
	int			save_sec;
	char	   *sql;
	MemoryContext old;

	if (grants_context == NULL)
	{
		grants_context = AllocSetContextCreate(TopMemoryContext, "idempotency scope grants",
											   ALLOCSET_SMALL_SIZES);
		CacheRegisterRelcacheCallback(grants_relcache_callback, (Datum) 0);
	}
	MemoryContextReset(grants_context);
	grants = NIL;
	grants_namespace = InvalidOid;	/* set when the list is whole */
	idem_refuse_attached_code(relid);
	grants_table = relid;
	grants_valid = true;		/* an invalidation while reading clears it */

	sql = psprintf("SELECT grantee, pattern FROM ONLY %s.idem_scope_grant",
				   quote_identifier(get_namespace_name(namespace)));
	idem_become_table_owner(relid, &save_user, &save_sec);
	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");
	PushActiveSnapshot(GetLatestSnapshot());
	if (SPI_execute(sql, true, 0) != SPI_OK_SELECT)
		elog(ERROR, "reading idem_scope_grant failed");
	PopActiveSnapshot();
	old = MemoryContextSwitchTo(grants_context);
	for (uint64 i = 0; i < SPI_processed; i++)
	{
		ScopeGrant *g = palloc(sizeof(ScopeGrant));

		g->grantee = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1);
		g->pattern = SPI_getvalue(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 2);
		grants = lappend(grants, g);
	}
	MemoryContextSwitchTo(old);
	SPI_finish();
	SetUserIdAndSecContext(save_user, save_sec);
	grants_namespace = namespace;
}

/*
 * The value of setting name when the current transaction set it with SET
 * LOCAL (or set_config(..., true)), else NULL.
 */
static const char *
transaction_local_setting(const char *name)
{
	struct config_generic *gconf = compat_find_guc(name);

	if (gconf == NULL || gconf->stack == NULL ||
		(gconf->stack->state != GUC_LOCAL && gconf->stack->state != GUC_SET_LOCAL))
		return NULL;
	return GetConfigOption(name, true, false);
}

static bool
pattern_matches(const char *pattern, const char *scope)
{
	size_t		len = strlen(pattern);

	if (len >= 2 && pattern[0] == '{' && pattern[len - 1] == '}')
	{
		char	   *name = pnstrdup(pattern + 1, len - 2);
		const char *value = transaction_local_setting(name);

		return value != NULL && strcmp(value, scope) == 0;
	}
	if (len >= 1 && pattern[len - 1] == '*')
		return strncmp(pattern, scope, len - 1) == 0;
	return strcmp(pattern, scope) == 0;
}

/*
 * Does grant g apply to role: is it to role, or to a role whose privileges
 * role has?  A name that no role of this node has applies to nobody.
 */
static bool
grant_applies_to(const ScopeGrant *g, Oid role)
{
	Oid			grantee = get_role_oid(g->grantee, true);

	return OidIsValid(grantee) && has_privs_of_role(role, grantee);
}

/* Does a grant to role, or to a role whose privileges it has, match scope? */
bool
idem_scope_is_permitted(Oid role, Oid namespace, const char *scope)
{
	ListCell   *lc;

	if (!grants_valid || grants_namespace != namespace)
		load_grants(namespace);
	foreach(lc, grants)
	{
		ScopeGrant *g = lfirst(lc);

		if (grant_applies_to(g, role) && pattern_matches(g->pattern, scope))
			return true;
	}
	return false;
}

/*
 * Does role hold any privilege on table relid, or on one of its columns?
 * ACL_ALL_RIGHTS_RELATION is every privilege the server can grant on a
 * table (MAINTAIN too, where the server has it).
 */
static bool
holds_table_privilege(Oid relid, Oid role)
{
	return pg_class_aclmask(relid, role, ACL_ALL_RIGHTS_RELATION, ACLMASK_ANY) != 0 ||
		pg_attribute_aclcheck_all(relid, role, ACL_ALL_RIGHTS_COLUMN, ACLMASK_ANY) == ACLCHECK_OK;
}

/* Take the grant changes committed since the last check */
static void
refresh_grants(void)
{
	AcceptInvalidationMessages();
}

/*
 * Begin the table work of a call on relid.  Invoker mode when the caller
 * holds any privilege on the table or its columns (it works as it always
 * has, each statement checked against its privileges); else the caller's
 * right to scope is checked (42501, the same for used and unused keys;
 * scope NULL: the function is gated by EXECUTE or filters by scope
 * itself), code another role attached to the table is refused (55000),
 * and the user id becomes the table's owner until idem_actor_end.
 */
void
idem_actor_begin(IdemActor *actor, Oid relid, Oid namespace, const char *scope)
{
	/* callers resolve the table first (idem_extension_relation) */
	if (!OidIsValid(relid))
		elog(ERROR, "idem_actor_begin called without a table");
	actor->caller = GetUserId();
	actor->delegated = false;
	if (holds_table_privilege(relid, actor->caller))
		return;
	refresh_grants();
	if (scope != NULL && !idem_scope_is_permitted(actor->caller, namespace, scope))
		ereport(ERROR,
				errcode(ERRCODE_INSUFFICIENT_PRIVILEGE),
				errmsg("permission denied for idempotency scope \"%s\"", idem_message_value(scope)),
				errdetail("Role \"%s\" has neither privileges on table %s nor a grant in idem_scope_grant that matches the scope.",
						  GetUserNameFromId(actor->caller, false), get_rel_name(relid)),
				errhint("Insert a row for the role, or a role it is a member of, into idem_scope_grant."));
	idem_refuse_attached_code(relid);

	/*
	 * On a Citus table the switch must happen on the node that holds the
	 * shard, where Citus runs a function delegated with
	 * create_distributed_function (docs/citus.md): Citus refuses a
	 * transaction whose placements two users wrote over its connections.
	 */
	idem_become_table_owner(relid, &actor->save_user, &actor->save_sec);
	actor->delegated = true;
}

/* End it: back to the caller's user id (an error does that by abort) */
void
idem_actor_end(IdemActor *actor)
{
	if (actor->delegated)
		SetUserIdAndSecContext(actor->save_user, actor->save_sec);
	actor->delegated = false;
}

/*
 * idem_scope_permitted(scope text) RETURNS boolean
 *	  Whether the current role may use scope in delegated mode: a grant in
 *	  idem_scope_grant to it or to a role whose privileges it has matches.
 *	  For views and policies.  Errors: 22004 NULL scope.
 */
PG_FUNCTION_INFO_V1(idem_scope_permitted);
Datum
idem_scope_permitted(PG_FUNCTION_ARGS)
{
	idem_require_arg(fcinfo, 0, "scope", "idem_scope_permitted");
	refresh_grants();
	PG_RETURN_BOOL(idem_scope_is_permitted(GetUserId(), get_func_namespace(fcinfo->flinfo->fn_oid),
										   text_to_cstring(PG_GETARG_TEXT_PP(0))));
}

/*
 * idem_scope_grants_changed() RETURNS trigger
 *	  Statement trigger of idem_scope_grant: every backend drops its cached
 *	  grants when the change commits.  Errors: 39P01 not called as a
 *	  trigger.
 */
PG_FUNCTION_INFO_V1(idem_scope_grants_changed);
Datum
idem_scope_grants_changed(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = (TriggerData *) fcinfo->context;

	if (!CALLED_AS_TRIGGER(fcinfo))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("idem_scope_grants_changed must be called as a trigger"));

	/*
	 * the table of the extension's schema: on Citus the trigger also fires on
	 * the table's placements (a reference table), named otherwise
	 */
	CacheInvalidateRelcacheByRelid(idem_extension_relation("idem_scope_grant",
														   RelationGetNamespace(trigdata->tg_relation)));
	return PointerGetDatum(NULL);
}
