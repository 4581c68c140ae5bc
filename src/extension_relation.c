/*
 * extension_relation.c
 *	  The extension's tables and sequences, found by name in its schema.
 *	  One that is not there (renamed, or dropped after ALTER EXTENSION
 *	  DROP) is an error that names it: its OID would be 0, which a
 *	  privilege check reports as "relation with OID 0 does not exist" and
 *	  an open as an internal error.
 */
#include "postgres.h"

#include "utils/lsyscache.h"

#include "extension_relation.h"

/* The OID of relation name in namespace; 42P01 if there is none */
Oid
idem_extension_relation(const char *name, Oid namespace)
{
	Oid			relid = get_relname_relid(name, namespace);

	if (!OidIsValid(relid))
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_TABLE),
				errmsg("relation \"%s\" of extension idempotency is missing from schema \"%s\"",
					   name, get_namespace_name(namespace)),
				errdetail("The extension's functions find its tables and sequences by the names its install script gave them."),
				errhint("Rename it back, or drop and create the extension again."));
	return relid;
}
