/*
 * transition.c
 *	  idem_transition: a compare-and-set move of a status column on any
 *	  table, by its primary key (one column, or several: (scope, id) of a
 *	  table distributed by scope).  "Already there" is success.
 *
 * The row is locked with SELECT ... FOR UPDATE, then the answer is decided
 * on the locked (newest committed) version: applied, already, rejected or
 * not_found.  The SQL is built from catalog names, every identifier quoted
 * and the table, types and operator schema-qualified; the key and the
 * states travel as parameters.  It runs in SPI with the caller's privileges
 * and row level security.
 */
#include "postgres.h"

#include "access/genam.h"
#include "access/htup_details.h"
#include "access/relation.h"
#include "access/stratnum.h"
#include "catalog/pg_class.h"
#include "catalog/pg_operator.h"
#include "catalog/pg_type.h"
#include "executor/spi.h"
#include "fmgr.h"
#include "lib/stringinfo.h"
#include "miscadmin.h"
#include "parser/parse_coerce.h"
#include "utils/acl.h"
#include "utils/array.h"
#include "utils/builtins.h"
#include "utils/lsyscache.h"
#include "utils/rel.h"
#include "utils/syscache.h"
#include "utils/typcache.h"

#include "args.h"
#include "compat.h"
#include "message_text.h"

/* OPERATOR(schema.name) of operator opno, for SQL */
static char *
qualified_operator(Oid opno)
{
	HeapTuple	tuple = SearchSysCache1(OPEROID, ObjectIdGetDatum(opno));
	Form_pg_operator op;
	char	   *result;

	if (!HeapTupleIsValid(tuple))
		elog(ERROR, "cache lookup failed for operator %u", opno);
	op = (Form_pg_operator) GETSTRUCT(tuple);
	result = psprintf("OPERATOR(%s.%s)",
					  quote_identifier(get_namespace_name(op->oprnamespace)),
					  NameStr(op->oprname));
	ReleaseSysCache(tuple);
	return result;
}

/* What the statement needs to know about the table */
typedef struct TransitionTarget
{
	Oid			relid;
	char	   *relname;		/* qualified and quoted, for SQL */
	char	   *display;		/* qualified, for messages */
	AttrNumber	status_attno;
	Oid			status_type;
	int32		status_typmod;
	char	   *status_column;	/* quoted */
	int			npk;			/* columns of the primary key */
	char	   *pk_column[INDEX_MAX_KEYS];	/* quoted */
	Oid			pk_type[INDEX_MAX_KEYS];	/* types of the key columns */
	const char *only;			/* "ONLY ": a plain table's rows, not its
								 * inheritance children's */
	char	   *pk_eq[INDEX_MAX_KEYS];	/* OPERATOR(schema.=) of each key
										 * column's opclass */
} TransitionTarget;

/*
 * Resolve rel and its status column and primary key.  Errors: 42809 not a
 * table, 42703 no such column, 42804 status column not text or enum,
 * 0A000 no primary key, 42501 no UPDATE privilege.
 */
static void
resolve_target(Oid relid, const char *status_column, TransitionTarget *t)
{
	char		relkind = get_rel_relkind(relid);
	Oid			status_base;
	char		category;
	bool		preferred;
	Relation	rel;
	Relation	index;
	Oid			pk_index;
	Oid			eqop;
	Oid			collation;
	char	   *nspname;

	if (relkind == '\0')
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_TABLE),
				errmsg("relation with OID %u does not exist", relid));
	t->relid = relid;
	nspname = get_namespace_name(get_rel_namespace(relid));
	t->relname = quote_qualified_identifier(nspname, get_rel_name(relid));
	t->display = psprintf("%s.%s", nspname, get_rel_name(relid));

	t->only = relkind == RELKIND_RELATION ? "ONLY " : "";
	if (relkind != RELKIND_RELATION && relkind != RELKIND_PARTITIONED_TABLE)
		ereport(ERROR,
				errcode(ERRCODE_WRONG_OBJECT_TYPE),
				errmsg("\"%s\" is not a table", t->display),
				errdetail("idem_transition locks and updates a row of a table by its primary key."),
				errhint("Pass the table that the view or foreign table is built on."));

	t->status_attno = get_attnum(relid, status_column);
	if (t->status_attno == InvalidAttrNumber || t->status_attno < 0)
		ereport(ERROR,
				errcode(ERRCODE_UNDEFINED_COLUMN),
				errmsg("column \"%s\" of relation \"%s\" does not exist",
					   status_column, t->display),
				errhint("status_column is the column name exactly as stored (case matters, no quotes)."));
	t->status_column = pstrdup(quote_identifier(status_column));
	get_atttypetypmodcoll(relid, t->status_attno, &t->status_type,
						  &t->status_typmod, &collation);
	status_base = getBaseType(t->status_type);
	get_type_category_preferred(status_base, &category, &preferred);
	if (!type_is_enum(status_base) && category != TYPCATEGORY_STRING)
		ereport(ERROR,
				errcode(ERRCODE_DATATYPE_MISMATCH),
				errmsg("column \"%s\" of relation \"%s\" is not a text or enum column",
					   status_column, t->display),
				errdetail("Its type is %s.", format_type_be(t->status_type)),
				errhint("idem_transition moves a status held as text, varchar or an enum."));

	/*
	 * Refuse before taking any lock when the caller may not update the status
	 * (the statement checks every privilege again).
	 */
	if (pg_class_aclcheck(relid, GetUserId(), ACL_UPDATE) != ACLCHECK_OK &&
		pg_attribute_aclcheck(relid, t->status_attno, GetUserId(), ACL_UPDATE) != ACLCHECK_OK)
		aclcheck_error(ACLCHECK_NO_PRIV, OBJECT_TABLE, get_rel_name(relid));

	rel = relation_open(relid, AccessShareLock);
	pk_index = compat_primary_key_index(rel);
	if (!OidIsValid(pk_index))
		ereport(ERROR,
				errcode(ERRCODE_FEATURE_NOT_SUPPORTED),
				errmsg("table \"%s\" has no primary key", t->display),
				errdetail("idem_transition finds the row by its primary key."),
				errhint("Add a primary key, or lock the row and compare its status in your own UPDATE."));
	index = index_open(pk_index, AccessShareLock);
	t->npk = IndexRelationGetNumberOfKeyAttributes(index);
	for (int i = 0; i < t->npk; i++)
	{
		AttrNumber	pk_attno = index->rd_index->indkey.values[i];

		if (pk_attno == 0)
			elog(ERROR, "primary key %u has an expression column", pk_index);
		t->pk_column[i] = pstrdup(quote_identifier(get_attname(relid, pk_attno, false)));
		t->pk_type[i] = get_atttype(relid, pk_attno);
		eqop = get_opfamily_member(index->rd_opfamily[i], index->rd_opcintype[i],
								   index->rd_opcintype[i], BTEqualStrategyNumber);
		if (!OidIsValid(eqop))
			elog(ERROR, "no equality operator in the operator family of index %u",
				 pk_index);
		t->pk_eq[i] = qualified_operator(eqop);
	}
	index_close(index, AccessShareLock);
	relation_close(rel, NoLock);
}

/*
 * How the key argument reaches the primary key column: its own type, an
 * implicit cast (int to bigint), or a string read as a literal would be
 * (a uuid or an integer sent as text).  Anything else: 42804.
 */
static void
check_key_type(const TransitionTarget *t, int column, Oid id_type)
{
	char		category;
	bool		preferred;

	if (id_type == UNKNOWNOID)
		return;
	get_type_category_preferred(getBaseType(id_type), &category, &preferred);
	if (category == TYPCATEGORY_STRING)
		return;
	if (can_coerce_type(1, &id_type, (Oid *) &t->pk_type[column], COERCION_IMPLICIT))
		return;
	ereport(ERROR,
			errcode(ERRCODE_DATATYPE_MISMATCH),
			errmsg("id of type %s does not match the primary key of \"%s\"",
				   format_type_be(id_type), t->display),
			errdetail("The primary key column %s is of type %s.",
					  t->pk_column[column], format_type_be(t->pk_type[column])),
			errhint("Cast id to %s.", format_type_be(t->pk_type[column])));
}

/*
 * A state given by the caller as a value of the status column's type;
 * raises the type's own error (22P02 for an enum label that does not
 * exist, 22001 for a string too long for a varchar(n)), the state in it
 * shortened.
 */
static Datum
state_value(const TransitionTarget *t, const char *state)
{
	return idem_input_value(t->status_type, t->status_typmod, state);
}

typedef enum TransitionOutcome
{
	TRANSITION_APPLIED,
	TRANSITION_ALREADY,
	TRANSITION_REJECTED,
	TRANSITION_NOT_FOUND
} TransitionOutcome;

static const char *const transition_outcome_names[] = {
	"applied", "already", "rejected", "not_found"
};

/*
 * The key column's type, schema-qualified and without a length: a cast to
 * char(1) or bit(1) (what "character" and "bit" mean) would truncate the id
 * and match another row.
 */
static char *
key_type_name(const TransitionTarget *t, int column)
{
	return format_type_extended(t->pk_type[column], -1,
								FORMAT_TYPE_TYPEMOD_GIVEN | FORMAT_TYPE_FORCE_QUALIFY);
}

/*
 * The key values as statement parameters $1 .. $npk (their types in
 * types): id itself for a single-column key; for a key of several columns,
 * the fields of id, a row of as many values in the key's column order
 * (ROW('acct_42', 1001) for PRIMARY KEY (scope, id)).  Errors: 42804 id
 * not such a row, or a field of an unusable type; 22004 a NULL field.
 */
static void
key_values(const TransitionTarget *t, Datum id, Oid id_type, Datum *values,
		   Oid *types)
{
	HeapTupleHeader row;
	TupleDesc	desc;
	HeapTupleData tuple;
	int			field = 0;

	if (t->npk == 1)
	{
		check_key_type(t, 0, id_type);
		values[0] = id;
		types[0] = id_type == UNKNOWNOID ? TEXTOID : id_type;
		if (id_type == UNKNOWNOID)
			values[0] = CStringGetTextDatum(DatumGetCString(id));
		return;
	}
	if (!type_is_rowtype(id_type))
		ereport(ERROR,
				errcode(ERRCODE_DATATYPE_MISMATCH),
				errmsg("id of type %s does not match the primary key of \"%s\"",
					   format_type_be(id_type), t->display),
				errdetail("The primary key has %d columns; id must be a row of %d values in the key's column order.",
						  t->npk, t->npk),
				errhint("Pass ROW(%s, ...) with the values of the key's columns.", t->pk_column[0]));
	row = DatumGetHeapTupleHeader(id);
	desc = lookup_rowtype_tupdesc(HeapTupleHeaderGetTypeId(row), HeapTupleHeaderGetTypMod(row));
	tuple.t_len = HeapTupleHeaderGetDatumLength(row);
	ItemPointerSetInvalid(&tuple.t_self);
	tuple.t_tableOid = InvalidOid;
	tuple.t_data = row;
	for (int i = 0; i < desc->natts; i++)
	{
		Form_pg_attribute att = TupleDescAttr(desc, i);
		bool		isnull;

		if (att->attisdropped)
			continue;
		if (field < t->npk)
		{
			values[field] = heap_getattr(&tuple, i + 1, desc, &isnull);
			if (isnull)
				ereport(ERROR,
						errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
						errmsg("id of idem_transition must not contain null"),
						errdetail("Field %d of id, for the primary key column %s, is null.",
								  field + 1, t->pk_column[field]));
			types[field] = att->atttypid == UNKNOWNOID ? TEXTOID : att->atttypid;
			if (att->atttypid == UNKNOWNOID)
				values[field] = CStringGetTextDatum(DatumGetCString(values[field]));
			check_key_type(t, field, att->atttypid);
		}
		field++;
	}
	ReleaseTupleDesc(desc);
	if (field != t->npk)
		ereport(ERROR,
				errcode(ERRCODE_DATATYPE_MISMATCH),
				errmsg("id has %d values but the primary key of \"%s\" has %d columns",
					   field, t->display, t->npk),
				errhint("Pass ROW(...) with the values of the key's columns in the key's order."));
}

/* "c1 OP CAST($1 AS t1) AND c2 OP CAST($2 AS t2) ..." */
static void
append_key_condition(StringInfo sql, const TransitionTarget *t)
{
	for (int i = 0; i < t->npk; i++)
		appendStringInfo(sql, "%s%s %s CAST($%d AS %s)", i > 0 ? " AND " : "",
						 t->pk_column[i], t->pk_eq[i], i + 1, key_type_name(t, i));
}

/*
 * idem_transition(rel regclass, id anycompatible, to_state text,
 *				   from_states text[], status_column name) RETURNS text
 *	  Lock the row of rel whose primary key is id (a row of the key's
 *	  values for a key of several columns); move its status_column to
 *	  to_state if it is in one of from_states.  Returns applied (moved),
 *	  already (it is in to_state: nothing written), rejected (in another
 *	  state: nothing written) or not_found.  Errors: 22004 NULL argument,
 *	  NULL element of from_states or NULL in a row id; 42809 rel is not a
 *	  table; 42703 no such column; 42804 status column not text/enum, id of
 *	  an unusable type or not a row of as many values as the key has;
 *	  0A000 no primary key; 42501 no UPDATE privilege; 25006 read-only
 *	  transaction or standby; 22P02 a state that is not a value of the
 *	  column's type; 40001 under REPEATABLE READ/SERIALIZABLE when the row
 *	  changed after the snapshot.
 */
PG_FUNCTION_INFO_V1(idem_transition);
Datum
idem_transition(PG_FUNCTION_ARGS)
{
	Oid			id_type = get_fn_expr_argtype(fcinfo->flinfo, 1);
	TransitionTarget t;
	char	   *to_state;
	Datum	   *from_datums;
	bool	   *from_nulls;
	int			n_from;
	StringInfoData sql;
	Datum		values[INDEX_MAX_KEYS + 1];
	Oid			types[INDEX_MAX_KEYS + 1];
	TransitionOutcome outcome;
	int			rc;

	idem_require_arg(fcinfo, 0, "rel", "idem_transition");
	idem_require_arg(fcinfo, 1, "id", "idem_transition");
	idem_require_arg(fcinfo, 2, "to_state", "idem_transition");
	idem_require_arg(fcinfo, 3, "from_states", "idem_transition");
	idem_require_arg(fcinfo, 4, "status_column", "idem_transition");
	if (!OidIsValid(id_type))
		elog(ERROR, "could not determine the type of argument id");
	idem_require_read_write("idem_transition");

	to_state = text_to_cstring(PG_GETARG_TEXT_PP(2));
	deconstruct_array(PG_GETARG_ARRAYTYPE_P(3), TEXTOID, -1, false,
					  TYPALIGN_INT, &from_datums, &from_nulls, &n_from);
	for (int i = 0; i < n_from; i++)
		if (from_nulls[i])
			ereport(ERROR,
					errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
					errmsg("from_states of idem_transition must not contain null"),
					errhint("List the states the row may move from, for example ARRAY['pending']."));

	resolve_target(PG_GETARG_OID(0), NameStr(*PG_GETARG_NAME(4)), &t);
	key_values(&t, PG_GETARG_DATUM(1), id_type, values, types);

	/* every state must be a value of the column (an enum label, ...) */
	values[t.npk] = state_value(&t, to_state);
	for (int i = 0; i < n_from; i++)
		(void) state_value(&t, TextDatumGetCString(from_datums[i]));
	types[t.npk] = t.status_type;

	if (SPI_connect() != SPI_OK_CONNECT)
		elog(ERROR, "SPI_connect failed");

	initStringInfo(&sql);
	appendStringInfo(&sql, "SELECT %s::pg_catalog.text FROM %s%s WHERE ",
					 t.status_column, t.only, t.relname);
	append_key_condition(&sql, &t);
	appendStringInfoString(&sql, " FOR UPDATE");
	rc = SPI_execute_with_args(sql.data, t.npk, types, values, NULL, false, 0);
	if (rc != SPI_OK_SELECT)
		elog(ERROR, "SPI_execute_with_args failed: %s", SPI_result_code_string(rc));

	if (SPI_processed == 0)
		outcome = TRANSITION_NOT_FOUND;
	else
	{
		bool		isnull;
		Datum		d;
		char	   *current = NULL;
		bool		allowed = false;

		if (SPI_processed > 1)
			elog(ERROR, "primary key of \"%s\" matched " UINT64_FORMAT " rows",
				 t.display, SPI_processed);
		d = SPI_getbinval(SPI_tuptable->vals[0], SPI_tuptable->tupdesc, 1, &isnull);
		if (!isnull)
			current = TextDatumGetCString(d);

		for (int i = 0; current != NULL && i < n_from; i++)
			if (strcmp(current, TextDatumGetCString(from_datums[i])) == 0)
				allowed = true;

		if (current != NULL && strcmp(current, to_state) == 0)
			outcome = TRANSITION_ALREADY;
		else if (!allowed)
			outcome = TRANSITION_REJECTED;
		else
		{
			resetStringInfo(&sql);
			appendStringInfo(&sql, "UPDATE %s%s SET %s = $%d WHERE ",
							 t.only, t.relname, t.status_column, t.npk + 1);
			append_key_condition(&sql, &t);
			rc = SPI_execute_with_args(sql.data, t.npk + 1, types, values, NULL, false, 0);
			if (rc != SPI_OK_UPDATE)
				elog(ERROR, "SPI_execute_with_args failed: %s", SPI_result_code_string(rc));

			/*
			 * The row is locked, so only a BEFORE UPDATE trigger returning
			 * NULL can leave it unchanged: nothing was written.
			 */
			outcome = SPI_processed == 1 ? TRANSITION_APPLIED : TRANSITION_REJECTED;
		}
	}
	SPI_finish();

	PG_RETURN_TEXT_P(cstring_to_text(transition_outcome_names[outcome]));
}
