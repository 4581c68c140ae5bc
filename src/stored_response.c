/*
 * stored_response.c
 *	  The stored form of an HTTP response, the result that
 *	  idem_finish_response records and the client packages replay:
 *	  {"status": 201, "headers": {...}, "body": "<text>"}, or "body_base64"
 *	  for a body that is not text a jsonb string can hold.
 *
 * Built here from the body's bytes: in SQL (encode(body, 'base64') without
 * its line breaks, jsonb_build_object) it cost the server several passes
 * over a large body, and deciding text or bytes in the client cost the
 * client's event loop a scan.  Here it is one check or encoding pass and
 * one copy into the jsonb.
 */
#include "postgres.h"

#include "common/base64.h"
#include "mb/pg_wchar.h"
#include "utils/numeric.h"

#include "stored_response.h"

/* push key, then value (pushed as given: a string, a number, an object) */
static void
push_member(JsonbParseState **state, const char *key, JsonbValue *value)
{
	JsonbValue	k;

	k.type = jbvString;
	k.val.string.val = unconstify(char *, key);
	k.val.string.len = strlen(key);
	pushJsonbValue(state, WJB_KEY, &k);
	pushJsonbValue(state, WJB_VALUE, value);
}

/*
 * The stored form of a response with status, headers (a JSON object, kept
 * as given) and body.  The body is kept as "body" when it is UTF-8 without
 * NUL in a UTF-8 database (a jsonb string holds the same characters), else
 * as "body_base64" (standard alphabet, padded, no line breaks): either way a
 * replay gives back the same bytes.  22023 for a status outside 100-999 or
 * headers that are not an object.
 */
Jsonb *
idem_stored_response(int32 status, Jsonb *headers, bytea *body)
{
	JsonbParseState *state = NULL;
	JsonbValue	v;
	char	   *data = VARDATA_ANY(body);
	int			len = VARSIZE_ANY_EXHDR(body);

	if (status < 100 || status > 999)
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("HTTP status %d is out of range", status),
				errhint("Pass the response's three-digit status code, 100 to 999."));
	if (!JB_ROOT_IS_OBJECT(headers) || JB_ROOT_IS_SCALAR(headers))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("headers must be a JSON object"),
				errhint("Pass the headers to replay as an object of name and value, for example '{\"content-type\": \"application/json\"}'."));

	pushJsonbValue(&state, WJB_BEGIN_OBJECT, NULL);

	v.type = jbvNumeric;
	v.val.numeric = int64_to_numeric(status);
	push_member(&state, "status", &v);

	v.type = jbvBinary;
	v.val.binary.data = &headers->root;
	v.val.binary.len = VARSIZE(headers) - VARHDRSZ;
	push_member(&state, "headers", &v);

	v.type = jbvString;
	if (GetDatabaseEncoding() == PG_UTF8 &&
		pg_encoding_verifymbstr(PG_UTF8, data, len) == len)
	{
		v.val.string.val = data;
		v.val.string.len = len;
		push_member(&state, "body", &v);
	}
	else
	{
		int			room = pg_b64_enc_len(len);

		v.val.string.val = palloc(room + 1);
		v.val.string.len = pg_b64_encode((const void *) data, len,
										 v.val.string.val, room);
		if (v.val.string.len < 0)
			elog(ERROR, "could not encode the response body as base64");
		push_member(&state, "body_base64", &v);
	}

	return JsonbValueToJsonb(pushJsonbValue(&state, WJB_END_OBJECT, NULL));
}
