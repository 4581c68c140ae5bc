/*
 * saved_plans.c
 *	  Prepared statements kept for the life of the backend, one set per
 *	  table, prepared on first use and again when the extension's schema
 *	  changes.  The texts name the table and the schema through %1$s and
 *	  %2$s, already quoted, so nothing depends on the caller's search_path.
 */
#include "postgres.h"

#include "executor/spi.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "saved_plans.h"

static SPIPlanPtr
saved_plan(SavedPlans *set, int id, Oid namespace)
{
	if (set->namespace != namespace)
	{
		for (int i = 0; i < set->nplans; i++)
		{
			if (set->plans[i])
				SPI_freeplan(set->plans[i]);
			set->plans[i] = NULL;
		}
		set->namespace = namespace;
	}
	if (set->plans[id] == NULL)
	{
		const char *nsp = quote_identifier(get_namespace_name(namespace));
		char	   *table = psprintf("%s.%s", nsp, quote_identifier(set->table));
		char	   *sql = psprintf(set->defs[id].sql, table, nsp);
		SPIPlanPtr	plan;

		plan = SPI_prepare(sql, set->defs[id].nargs, (Oid *) set->defs[id].argtypes);
		if (plan == NULL)
			elog(ERROR, "SPI_prepare failed for \"%s\": %s",
				 sql, SPI_result_code_string(SPI_result));
		if (SPI_keepplan(plan) != 0)
			elog(ERROR, "SPI_keepplan failed");
		set->plans[id] = plan;
	}
	return set->plans[id];
}

/*
 * Run statement id of set against the table in namespace (inside SPI);
 * elog when it does not answer the SPI code expected.  Returns
 * SPI_processed; SPI_tuptable holds any rows.
 */
uint64
idem_saved_plan_exec(SavedPlans *set, int id, Oid namespace, Datum *values,
					 const char *nulls, int expected)
{
	int			rc = SPI_execute_plan(saved_plan(set, id, namespace),
									  values, nulls, false, 0);

	if (rc != expected)
		elog(ERROR, "%s statement %d failed: %s",
			 set->table, id, SPI_result_code_string(rc));
	return SPI_processed;
}
