/*
 * citus.c
 *	  What the extension needs to know of Citus: whether a table is a Citus
 *	  table (its rows then live in shards that only planned SQL reaches),
 *	  the preload order the commit guard depends on, idem_shard_probe, the
 *	  look of wait => false run on the node that holds a record's shard,
 *	  and purge one scope at a time, so that each statement is routed.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/stratnum.h"
#include "access/table.h"
#include "catalog/pg_namespace_d.h"
#include "catalog/pg_type_d.h"
#include "miscadmin.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/fmgroids.h"
#include "utils/guc.h"
#include "utils/lsyscache.h"
#include "utils/timestamp.h"
#include "utils/varlena.h"

#include "args.h"
#include "citus.h"
#include "idempotency.h"
#include "record_direct.h"
#include "saved_plans.h"

/*
 * Is relid a Citus table (distributed, reference, or otherwise managed by
 * Citus)?  Its row in pg_dist_partition says so, on the coordinator and on
 * every node that has Citus metadata (a worker of Citus MX).  The table
 * here may then be an empty shell: only planned SQL, which Citus routes,
 * finds its rows.  A shard is no Citus table: it is a plain table of the
 * node that holds it.
 */
bool
idem_citus_table(Oid relid)
{
	Oid			catalog = get_relname_relid("pg_dist_partition", PG_CATALOG_NAMESPACE);
	Relation	partitions;
	ScanKeyData skey;
	SysScanDesc scan;
	bool		found;

	if (!OidIsValid(catalog))
		return false;			/* Citus is not installed in this database */
	partitions = table_open(catalog, AccessShareLock);
	/* its first column, logicalrelid (regclass), names the table */
	ScanKeyInit(&skey, 1, BTEqualStrategyNumber, F_OIDEQ, ObjectIdGetDatum(relid));
	scan = systable_beginscan(partitions, InvalidOid, false, NULL, 1, &skey);
	found = HeapTupleIsValid(systable_getnext(scan));
	systable_endscan(scan);
	table_close(partitions, AccessShareLock);
	return found;
}

/* The file name of a shared_preload_libraries entry, without directory */
static bool
library_is(const char *entry, const char *name)
{
	const char *base = strrchr(entry, '/');
	size_t		len = strlen(name);

	base = base ? base + 1 : entry;
	return strncmp(base, name, len) == 0 &&
		(base[len] == '\0' || strcmp(base + len, DLSUFFIX) == 0);
}

/*
 * Refuse to be preloaded before citus.  Transaction callbacks run newest
 * first, so a library loaded after citus sees a commit before citus does:
 * the commit guard (IK004) must refuse an unfinished claim before citus
 * commits the transaction's writes on the workers.  Loaded before citus,
 * the guard would fire after the workers committed.  Raised while the
 * postmaster preloads, the error stops the server from starting.
 */
void
idem_check_preload_order(void)
{
	char	   *libraries;
	List	   *entries;
	ListCell   *lc;
	bool		seen_self = false;

	if (!process_shared_preload_libraries_in_progress)
		return;
	libraries = pstrdup(GetConfigOption("shared_preload_libraries", false, false));
	if (!SplitDirectoriesString(libraries, ',', &entries))
		return;					/* the server itself refuses such a list */
	foreach(lc, entries)
	{
		const char *entry = lfirst(lc);

		if (library_is(entry, "idempotency"))
			seen_self = true;
		else if (library_is(entry, "citus") && seen_self)
			ereport(ERROR,
					errcode(ERRCODE_CONFIG_FILE_ERROR),
					errmsg("idempotency must be preloaded after citus"),
					errdetail("shared_preload_libraries is \"%s\"; with idempotency before citus, the commit guard would run after Citus has committed on the workers.",
							  GetConfigOption("shared_preload_libraries", false, false)),
					errhint("Set shared_preload_libraries = 'citus,idempotency' (citus first) and start the server again."));
	}
}

/*
 * idem_shard_probe(shard bigint, scope text, key text) RETURNS bytea[]
 *	  The look of idem_claim(wait => false) for a Citus table, run on the
 *	  node that holds shard (a shard of the schema's idempotent_record):
 *	  is another transaction, still in progress, writing the record of
 *	  (scope, key)?  Returns {fingerprint} (an array of one element, NULL
 *	  when that record has none) if so, {} if not, and NULL when the caller
 *	  may not read the shard directly (row level security applies, no USAGE
 *	  on the schema).  idem_claim calls it in a query that Citus routes to
 *	  the shard; callers have no use for it.  Errors: 22004 NULL argument,
 *	  42P01 no such shard on this node, 42501 no SELECT privilege on it.
 */
PG_FUNCTION_INFO_V1(idem_shard_probe);
Datum
idem_shard_probe(PG_FUNCTION_ARGS)
{
	int64		shard;
	IdemKey		id;
	char	   *name;
	Oid			relid;
	bytea	   *fingerprint;
	Datum		element;
	bool		isnull;
	int			dims[1] = {1};
	int			lbs[1] = {1};

	idem_require_arg(fcinfo, 0, "shard", "idem_shard_probe");
	idem_require_arg(fcinfo, 1, "scope", "idem_shard_probe");
	idem_require_arg(fcinfo, 2, "key", "idem_shard_probe");
	shard = PG_GETARG_INT64(0);
	id.scope = text_to_cstring(PG_GETARG_TEXT_PP(1));
	id.key = text_to_cstring(PG_GETARG_TEXT_PP(2));

	/* Citus names a shard after its table: idempotent_record_<shard> */
	name = psprintf("idempotent_record_" INT64_FORMAT, shard);
	relid = get_relname_relid(name, get_func_namespace(fcinfo->flinfo->fn_oid));
	if (!OidIsValid(relid))
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_TABLE),
				errmsg("shard " INT64_FORMAT " of idempotent_record is not on this node", shard),
				errdetail("No table %s is in the extension's schema here.", name),
				errhint("idem_claim calls idem_shard_probe in a query that Citus routes to the shard; do not call it directly."));

	/* as the routed SELECT that carries the call would have */
	if (pg_class_aclcheck(relid, GetUserId(), ACL_SELECT) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, name);

	switch (idem_direct_probe_uncommitted(relid, &id, &fingerprint, CurrentMemoryContext))
	{
		case DIRECT_NOT_USED:
			PG_RETURN_NULL();
		case DIRECT_NONE:
			PG_RETURN_ARRAYTYPE_P(construct_empty_array(BYTEAOID));
		case DIRECT_FOUND:
			break;
	}
	isnull = fingerprint == NULL;
	element = isnull ? (Datum) 0 : PointerGetDatum(fingerprint);
	PG_RETURN_ARRAYTYPE_P(construct_md_array(&element, &isnull, 1, dims, lbs,
											 BYTEAOID, -1, false, TYPALIGN_INT));
}

/*
 * Delete up to batch_size expired rows of a Citus table (inside SPI): the
 * scopes that have some, from scopes_plan ($1 now, $2 how many), then the
 * expired rows of each scope, from scope_plan ($1 now, $2 how many, $3
 * the scope), which Citus routes to that scope's shard.  No statement
 * locks rows on more than one shard, and SKIP LOCKED leaves rows that a
 * claim is writing, as on a plain table.  Returns how many went.
 */
int64
idem_purge_by_scope(SavedPlans *set, int scopes_plan, int scope_plan,
					Oid namespace, TimestampTz now, int32 batch_size)
{
	Datum		values[3];
	uint64		nscopes;
	Datum	   *scopes;
	int64		purged = 0;

	values[0] = TimestampTzGetDatum(now);
	values[1] = Int32GetDatum(batch_size);
	nscopes = idem_saved_plan_exec(set, scopes_plan, namespace, values, NULL, SPI_OK_SELECT);
	scopes = palloc(sizeof(Datum) * Max(nscopes, 1));
	for (uint64 i = 0; i < nscopes; i++)
	{
		bool		isnull;

		scopes[i] = SPI_getbinval(SPI_tuptable->vals[i], SPI_tuptable->tupdesc, 1, &isnull);
		scopes[i] = PointerGetDatum(DatumGetTextPCopy(scopes[i]));
	}
	for (uint64 i = 0; i < nscopes && purged < batch_size; i++)
	{
		values[1] = Int32GetDatum(batch_size - (int32) purged);
		values[2] = scopes[i];
		purged += idem_saved_plan_exec(set, scope_plan, namespace, values, NULL, SPI_OK_DELETE);
	}
	return purged;
}
