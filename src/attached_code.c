/*
 * attached_code.c
 *	  What the extension refuses to run as a table's owner: code that
 *	  another role could have attached to one of its tables.  A trigger
 *	  runs with the rights of whoever fires it, so in delegated mode a
 *	  trigger whose function another role owns (and may replace at any
 *	  time) would run that role's code as the owner.  A foreign key that
 *	  references the table runs actions of the referencing table and makes
 *	  purge fail on one referenced record, so it is not supported at all.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/table.h"
#include "catalog/pg_depend.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_proc.h"
#include "catalog/pg_trigger.h"
#include "commands/trigger.h"
#include "miscadmin.h"
#include "utils/fmgroids.h"
#include "utils/lsyscache.h"
#include "utils/regproc.h"
#include "utils/rel.h"
#include "utils/syscache.h"

#include "attached_code.h"

static Oid
function_owner(Oid fn)
{
	HeapTuple	tuple = SearchSysCache1(PROCOID, ObjectIdGetDatum(fn));
	Oid			owner;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for function %u", fn);
	owner = ((Form_pg_proc) GETSTRUCT(tuple))->proowner;
	ReleaseSysCache(tuple);
	return owner;
}

/* Only the table's owner and superusers may have written what it runs */
static bool
trusted_function(Oid fn, Oid table_owner)
{
	Oid			owner = function_owner(fn);

	return owner == table_owner || superuser_arg(owner);
}

/*
 * The first function that trigger tgoid runs and an untrusted role owns:
 * its trigger function, else one its WHEN clause calls (directly or as an
 * operator's function), as recorded in pg_depend.  InvalidOid: none.
 */
static Oid
untrusted_function(const Trigger *trigger, Oid table_owner)
{
	Relation	depend;
	ScanKeyData key[2];
	SysScanDesc scan;
	HeapTuple	tuple;
	Oid			found = InvalidOid;

	if (!trusted_function(trigger->tgfoid, table_owner))
		return trigger->tgfoid;
	if (trigger->tgqual == NULL)
		return InvalidOid;

	depend = table_open(DependRelationId, AccessShareLock);
	ScanKeyInit(&key[0], Anum_pg_depend_classid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(TriggerRelationId));
	ScanKeyInit(&key[1], Anum_pg_depend_objid, BTEqualStrategyNumber, F_OIDEQ,
				ObjectIdGetDatum(trigger->tgoid));
	scan = systable_beginscan(depend, DependDependerIndexId, true, NULL, 2, key);
	while (!OidIsValid(found) && HeapTupleIsValid(tuple = systable_getnext(scan)))
	{
		Form_pg_depend dep = (Form_pg_depend) GETSTRUCT(tuple);
		Oid			fn = InvalidOid;

		if (dep->refclassid == ProcedureRelationId)
			fn = dep->refobjid;
		else if (dep->refclassid == OperatorRelationId)
			fn = get_opcode(dep->refobjid);
		if (OidIsValid(fn) && !trusted_function(fn, table_owner))
			found = fn;
	}
	systable_endscan(scan);
	table_close(depend, AccessShareLock);
	return found;
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
 * role could have attached: a trigger (row or statement, constraint or
 * deferred, enabled or not: any may be enabled later) one of whose
 * functions is owned neither by the table's owner nor by a superuser, or
 * a foreign key that references the table.  Citus's own triggers belong
 * to a superuser's extension and pass.
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
		Oid			fn = untrusted_function(t, rel->rd_rel->relowner);

		if (OidIsValid(fn))
			ereport(ERROR,
					errcode(ERRCODE_OBJECT_NOT_IN_PREREQUISITE_STATE),
					errmsg("trigger \"%s\" on table \"%s\" runs a function of role \"%s\"",
						   t->tgname, RelationGetRelationName(rel),
						   GetUserNameFromId(function_owner(fn), false)),
					errdetail("Calls of roles without privileges on the table work as its owner, and would run function %s, which is owned neither by the table's owner nor by a superuser.",
							  format_procedure(fn)),
					errhint("Drop the trigger, or let the table's owner own the function."));
	}
	relation_close(rel, NoLock);
}
