/*
 * attached_code.c
 *	  What the extension refuses to run as a table's owner: code that
 *	  another role could have attached to one of its tables.  A trigger
 *	  runs with the rights of whoever fires it, so in delegated mode any
 *	  trigger but the extension's own and Citus's could run another role's
 *	  code as the owner.  A foreign key that references the table runs
 *	  actions of the referencing table and makes purge fail on one
 *	  referenced record, so it is not supported at all.
 */
#include "postgres.h"

#include "access/relation.h"
#include "catalog/dependency.h"
#include "catalog/pg_proc.h"
#include "commands/extension.h"
#include "commands/trigger.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"

#include "attached_code.h"

/*
 * Is trigger one that delegated mode runs as the owner?  A foreign key's
 * check on the table's own side (built in: it reads the referenced table
 * as that table's owner and runs none of its code), or a trigger of this
 * extension or of Citus without a WHEN clause.  Nothing else: a trigger's
 * function, its WHEN clause (functions, operators, types with their
 * domain checks and casts), its arguments given to a trusted function
 * (lo_manage) and the names its code resolves through the caller's
 * search_path and temporary tables can all be another role's code, and
 * the function's owner does not tell who made the trigger.
 */
static bool
trusted_trigger(const Trigger *trigger)
{
	Oid			extension;

	if (RI_FKey_trigger_type(trigger->tgfoid) == RI_TRIGGER_FK)
		return true;
	if (trigger->tgqual != NULL)
		return false;
	extension = getExtensionOfObject(ProcedureRelationId, trigger->tgfoid);
	return OidIsValid(extension) &&
		(extension == get_extension_oid("idempotency", false) ||
		 extension == get_extension_oid("citus", true));
}

/*
 * 55000 when a foreign key references rel: its referenced-side triggers
 * (RI_TRIGGER_PK) stand on rel
 */
static void
refuse_referencing_keys(Relation rel)
{
	TriggerDesc *triggers = rel->trigdesc;

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
	TriggerDesc *triggers = rel->trigdesc;

	refuse_referencing_keys(rel);
	for (int i = 0; triggers != NULL && i < triggers->numtriggers; i++)
	{
		Trigger    *t = &triggers->triggers[i];

		if (!trusted_trigger(t))
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("trigger \"%s\" on table \"%s\" would run as the table's owner",
						   t->tgname, RelationGetRelationName(rel)),
					errdetail("Calls of roles without privileges on the table work as its owner, and run no trigger on it but the extension's own and Citus's: what another trigger runs, through its function, its WHEN clause, its arguments or the caller's search path, can be another role's code."),
					errhint("Drop the trigger, or give the roles that call the functions a privilege on the table, so that their calls run as themselves."));
	}
	relation_close(rel, NoLock);
}
