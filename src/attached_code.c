/*
 * attached_code.c
 *	  What the extension refuses to run as a table's owner: code that
 *	  another role could have attached to one of its tables.  A trigger
 *	  runs with the rights of whoever fires it, so in delegated mode any
 *	  trigger but those the extension and Citus made could run another
 *	  role's code as the owner.  A foreign key that references the table
 *	  runs actions of the referencing table and makes purge fail on one
 *	  referenced record, so it is not supported at all.
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/dependency.h"
#include "catalog/pg_class.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "attached_code.h"

/*
 * The triggers the extension's scripts make on its own tables, of every
 * version (the library serves each).  A trigger cannot be a member of an
 * extension, so one is the extension's when it stands on the extension's
 * table of that name, under that name, with exactly that definition: no
 * role can make a second trigger of a name the table has, and only the
 * table's owner can drop or rename the extension's.  Its function alone
 * proves nothing: any role with TRIGGER can attach idem_version_guard or
 * idem_transition_guard, with arguments of its choice.  Keep it in step
 * with the scripts.
 */
typedef struct OwnTrigger
{
	const char *table;
	const char *name;
	const char *function;		/* of the extension, no arguments */
	int16		type;			/* tgtype */
} OwnTrigger;

static const OwnTrigger own_triggers[] = {
	/* idempotency--1.0--1.1.sql: the scope grants' cache invalidation */
	{"idem_scope_grant", "idem_scope_grant_changed", "idem_scope_grants_changed",
	 TRIGGER_TYPE_STATEMENT | TRIGGER_TYPE_AFTER | TRIGGER_TYPE_INSERT |
	 TRIGGER_TYPE_UPDATE | TRIGGER_TYPE_DELETE | TRIGGER_TYPE_TRUNCATE},
};

/* Is object (classid, objid) a member of extension? */
static bool
member_of(Oid classid, Oid objid, Oid extension)
{
	return OidIsValid(extension) && getExtensionOfObject(classid, objid) == extension;
}

/*
 * Is trigger on rel one that the extension's script made?  Exactly as
 * own_triggers says: no arguments, WHEN clause, column list, transition
 * tables or constraint (whether it is enabled does not matter: a disabled
 * trigger runs nothing, and the owner may enable it only as it was made).
 */
static bool
own_trigger(Relation rel, const Trigger *trigger)
{
	Oid			extension = get_extension_oid("idempotency", true);

	if (!member_of(RelationRelationId, RelationGetRelid(rel), extension) ||
		!member_of(ProcedureRelationId, trigger->tgfoid, extension) ||
		trigger->tgnargs != 0 || trigger->tgqual != NULL || trigger->tgnattr != 0 ||
		trigger->tgoldtable != NULL || trigger->tgnewtable != NULL ||
		OidIsValid(trigger->tgconstraint) || trigger->tgisinternal)
		return false;
	for (int i = 0; i < (int) lengthof(own_triggers); i++)
	{
		const OwnTrigger *own = &own_triggers[i];

		if (strcmp(RelationGetRelationName(rel), own->table) == 0 &&
			strcmp(trigger->tgname, own->name) == 0 &&
			trigger->tgtype == own->type &&
			strcmp(get_func_name(trigger->tgfoid), own->function) == 0)
			return true;
	}
	return false;
}

/*
 * Is trigger one that delegated mode runs as the owner?  A foreign key's
 * check on the table's own side (built in: it reads the referenced table
 * as that table's owner and runs none of its code), a trigger the
 * extension made (own_trigger), or one Citus made: an internal trigger
 * (no role can make one with SQL) of a Citus function, its truncate
 * trigger.  Nothing else: a trigger's function, its WHEN clause
 * (functions, operators, types with their domain checks and casts), its
 * arguments given to a trusted function (lo_manage, idem_version_guard)
 * and the names its code resolves through the caller's search_path and
 * temporary tables can all be another role's code or choice, and the
 * function's owner does not tell who made the trigger.
 */
static bool
trusted_trigger(Relation rel, const Trigger *trigger)
{
	if (RI_FKey_trigger_type(trigger->tgfoid) == RI_TRIGGER_FK)
		return true;
	if (own_trigger(rel, trigger))
		return true;
	return trigger->tgisinternal && trigger->tgqual == NULL &&
		member_of(ProcedureRelationId, trigger->tgfoid, get_extension_oid("citus", true));
}

/*
 * 55000 when a foreign key references rel: its referenced-side triggers
 * (RI_TRIGGER_PK) stand on rel
 */
static void
refuse_referencing_keys(Relation rel)
{
	/* a copy, for the reason idem_refuse_attached_code gives */
	TriggerDesc *triggers = CopyTriggerDesc(rel->trigdesc);

	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (RI_FKey_trigger_type(t->tgfoid) == RI_TRIGGER_PK)
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("foreign key \"%s\" of table \"%s\" references table \"%s\"",
						   get_constraint_name(t->tgconstraint),
						   get_rel_name(t->tgconstrrelid), RelationGetRelationName(rel)),
					errdetail("Foreign keys that reference the extension's tables are not supported: purge could not delete a referenced row, and the key's actions would run when the extension works as the table's owner."),
					errhint("Drop the foreign key; keep the idempotency key in a column of your own table without one."));
	}
	FreeTriggerDesc(triggers);
}

/* 55000 when a foreign key references table relid (purge checks it) */
void
idem_refuse_referencing_keys(Oid relid)
{
	Relation	rel = relation_open(relid, AccessShareLock);

	refuse_referencing_keys(rel);
	relation_close(rel, NoLock);
}

/*
 * 55000 when working as the owner of table relid would run code another
 * role could have attached: a foreign key that references the table, or
 * any trigger but those trusted_trigger accepts (row or statement,
 * constraint or deferred, enabled or not: any may be enabled later).
 */
void
idem_refuse_attached_code(Oid relid)
{
	Relation	rel = relation_open(relid, AccessShareLock);

	/*
	 * A copy, as InitResultRelInfo takes one: AccessShareLock lets another
	 * session commit CREATE TRIGGER, and the catalog reads below may take
	 * that invalidation and free the relcache's list mid-loop.
	 */
	TriggerDesc *triggers = CopyTriggerDesc(rel->trigdesc);

	refuse_referencing_keys(rel);
	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (!trusted_trigger(rel, t))
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("trigger \"%s\" on table \"%s\" would run as the table's owner",
						   t->tgname, RelationGetRelationName(rel)),
					errdetail("Calls of roles without privileges on the table work as its owner, and run no trigger on it but those the extension and Citus made: what another trigger runs, through its function (the extension's own too), its WHEN clause, its arguments or the caller's search path, can be another role's code or choice."),
					errhint("Drop the trigger, or give the roles that call the functions a privilege on the table, so that their calls run as themselves."));
	}
	FreeTriggerDesc(triggers);
	relation_close(rel, NoLock);
}
