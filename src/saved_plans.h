/*
 * saved_plans.h
 *	  Saved SPI plans (saved_plans.c): a set of prepared statements on one
 *	  table of the extension's schema (%1$s in the text is the table, %2$s
 *	  the schema), prepared again when that schema changes.
 */
#ifndef IDEMPOTENCY_SAVED_PLANS_H
#define IDEMPOTENCY_SAVED_PLANS_H

#include "executor/spi.h"

typedef struct SavedPlanDef
{
	const char *sql;
	int			nargs;
	Oid			argtypes[8];
} SavedPlanDef;

typedef struct SavedPlans
{
	const char *table;
	const SavedPlanDef *defs;
	int			nplans;
	SPIPlanPtr *plans;			/* [nplans], NULL until prepared */
	Oid			namespace;		/* schema the plans were prepared for */
} SavedPlans;

/* A SavedPlans for table, its plans defined by defs[] and kept in plans[] */
#define SAVED_PLANS_INIT(table_name, defs_array, plans_array) \
	{(table_name), (defs_array), lengthof(defs_array), (plans_array), InvalidOid}

extern uint64 idem_saved_plan_exec(SavedPlans *set, int id, Oid namespace,
								   Datum *values, const char *nulls, int expected);

#endif							/* IDEMPOTENCY_SAVED_PLANS_H */
