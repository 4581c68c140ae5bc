/*
 * version_guard.c
 *	  idem_version_guard: a row trigger for optimistic locking on a version
 *	  column (IK006).
 */
#include "postgres.h"

#include "access/htup_details.h"
#include "catalog/pg_type.h"
#include "common/int.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"

#include "guards.h"
#include "idempotency.h"

/* A version as int64; a NULL version counts as 0 */
static int64
version_value(HeapTuple tuple, TupleDesc desc, AttrNumber attno, Oid type,
			  bool *isnull)
{
	Datum		d = heap_getattr(tuple, attno, desc, isnull);

	if (*isnull)
		return 0;
	switch (type)
	{
		case INT2OID:
			return DatumGetInt16(d);
		case INT4OID:
			return DatumGetInt32(d);
		default:
			return DatumGetInt64(d);
	}
}

/*
 * idem_version_guard() RETURNS trigger
 *	  Argument: the version column (default "version"), of type smallint,
 *	  integer or bigint.  BEFORE UPDATE FOR EACH ROW: an update that gives
 *	  the stored version gets it incremented; one that gives the stored
 *	  version + 1 (as ORMs do: SET version = read + 1 WHERE version = read)
 *	  keeps it; any other version raises IK006 (a NULL version counts as
 *	  0).  Errors: IK006 stale version, 22003 version past the type's
 *	  range, 22023 bad trigger argument, 39P01 not fired BEFORE UPDATE FOR
 *	  EACH ROW.
 */
PG_FUNCTION_INFO_V1(idem_version_guard);
Datum
idem_version_guard(PG_FUNCTION_ARGS)
{
	TriggerData *trigdata = idem_guard_trigger_data(fcinfo, "idem_version_guard");
	Trigger    *tg = trigdata->tg_trigger;
	TupleDesc	desc = RelationGetDescr(trigdata->tg_relation);
	const char *column;
	AttrNumber	attno;
	Oid			type;
	int64		stored;
	int64		given;
	bool		stored_null;
	bool		given_null;
	int64		next;
	Datum		value;
	bool		value_null = false;
	int			col;

	if (!TRIGGER_FIRED_BEFORE(trigdata->tg_event) ||
		!TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event))
		ereport(ERROR,
				errcode(ERRCODE_E_R_I_E_TRIGGER_PROTOCOL_VIOLATED),
				errmsg("idem_version_guard() must be fired BEFORE UPDATE FOR EACH ROW"),
				errdetail("Trigger \"%s\" on table \"%s\" fired %s %s.",
						  tg->tgname, RelationGetRelationName(trigdata->tg_relation),
						  TRIGGER_FIRED_BEFORE(trigdata->tg_event) ? "BEFORE" :
						  TRIGGER_FIRED_INSTEAD(trigdata->tg_event) ? "INSTEAD OF" : "AFTER",
						  TRIGGER_FIRED_BY_INSERT(trigdata->tg_event) ? "INSERT" :
						  TRIGGER_FIRED_BY_UPDATE(trigdata->tg_event) ? "UPDATE" : "DELETE"),
				errhint("Use %s.", VERSION_USAGE));
	if (tg->tgnargs > 1)
		idem_guard_bad_argument_count(trigdata, false);

	column = tg->tgnargs == 1 ? tg->tgargs[0] : "version";
	attno = idem_guard_column(trigdata, "idem_version_guard", column, VERSION_USAGE);
	type = getBaseType(TupleDescAttr(desc, attno - 1)->atttypid);
	if (type != INT2OID && type != INT4OID && type != INT8OID)
		idem_guard_bad_argument(trigdata, "idem_version_guard", column,
								psprintf(_("Column \"%s\" is of type %s."), column,
										 format_type_be(TupleDescAttr(desc, attno - 1)->atttypid)),
								VERSION_USAGE);

	stored = version_value(trigdata->tg_trigtuple, desc, attno, type, &stored_null);
	given = version_value(trigdata->tg_newtuple, desc, attno, type, &given_null);
	if (pg_add_s64_overflow(stored, 1, &next) ||
		(type == INT2OID && next > PG_INT16_MAX) ||
		(type == INT4OID && next > PG_INT32_MAX))
		ereport(ERROR,
				errcode(ERRCODE_NUMERIC_VALUE_OUT_OF_RANGE),
				errmsg("version of the row is at the maximum of its type"),
				errdetail("Column \"%s\" of table \"%s\" stores version " INT64_FORMAT ".",
						  column, RelationGetRelationName(trigdata->tg_relation), stored),
				errhint("Use a bigint version column."));

	/* the update already carries the next version, as ORMs send it */
	if (!given_null && given == next)
		return PointerGetDatum(trigdata->tg_newtuple);

	if (stored != given || stored_null != given_null)
		ereport(ERROR,
				errcode(ERRCODE_IDEM_STALE_VERSION),
				errmsg("stale version: the row was changed since it was read"),
				errdetail("Column \"%s\" of table \"%s\" stores version %s; the update gives version %s.",
						  column, RelationGetRelationName(trigdata->tg_relation),
						  stored_null ? "NULL" : psprintf(INT64_FORMAT, stored),
						  given_null ? "NULL" : psprintf(INT64_FORMAT, given)),
				errhint("Read the row again and retry with its current version."));

	value = type == INT2OID ? Int16GetDatum((int16) next) :
		type == INT4OID ? Int32GetDatum((int32) next) : Int64GetDatum(next);
	col = attno;
	return PointerGetDatum(heap_modify_tuple_by_cols(trigdata->tg_newtuple,
													 desc, 1, &col,
													 &value, &value_null));
}
