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

#include "idempotency.h"
#include "message_text.h"
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

/* is c a character of an HTTP token (RFC 9110 tchar)? (not NUL, which strchr finds) */
static bool
is_token_char(char c)
{
	return (c >= '0' && c <= '9') || (c >= 'a' && c <= 'z') ||
		(c >= 'A' && c <= 'Z') || (c != '\0' && strchr("!#$%&'*+-.^_`|~", c) != NULL);
}

pg_noreturn static void
unreplayable_header(const char *name, int len)
{
	ereport(ERROR,
			errcode(ERRCODE_INVALID_PARAMETER_VALUE),
			errmsg("header \"%s\" cannot be replayed", idem_message_value(pnstrdup(name, len))),
			errdetail("A header's name is a token and its value a string, or an array of strings, without CR or LF."),
			errhint("Store the headers as the response carried them, for example '{\"content-type\": \"application/json\", \"link\": [\"<a>\", \"<b>\"]}'."));
}

/*
 * 22023 unless headers is an object of names (tokens) and values (strings,
 * or arrays of strings, without CR or LF): what a replay can send again.
 */
static void
check_headers(Jsonb *headers)
{
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken token;
	const char *name = "";
	int			name_len = 0;
	int			depth = 0;

	if (!JB_ROOT_IS_OBJECT(headers))
		ereport(ERROR,
				errcode(ERRCODE_INVALID_PARAMETER_VALUE),
				errmsg("headers must be a JSON object"),
				errhint("Pass the headers to replay as an object of name and value, for example '{\"content-type\": \"application/json\"}'."));
	it = JsonbIteratorInit(&headers->root);
	while ((token = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		switch (token)
		{
			case WJB_BEGIN_OBJECT:
			case WJB_BEGIN_ARRAY:
				/* the headers object, then a name's array of values */
				if (++depth > 2 || (depth == 2 && token == WJB_BEGIN_OBJECT))
					unreplayable_header(name, name_len);
				break;
			case WJB_END_OBJECT:
			case WJB_END_ARRAY:
				depth--;
				break;
			case WJB_KEY:
				name = v.val.string.val;
				name_len = v.val.string.len;
				if (name_len == 0)
					unreplayable_header(name, name_len);
				for (int i = 0; i < name_len; i++)
					if (!is_token_char(name[i]))
						unreplayable_header(name, name_len);
				break;
			case WJB_VALUE:
			case WJB_ELEM:
				if (v.type != jbvString ||
					memchr(v.val.string.val, '\r', v.val.string.len) != NULL ||
					memchr(v.val.string.val, '\n', v.val.string.len) != NULL)
					unreplayable_header(name, name_len);
				break;
			case WJB_DONE:
				break;
		}
	}
}

/*
 * The stored form of a response with status, headers (a JSON object, kept
 * as given) and body.  The body is kept as "body" when it is UTF-8 without
 * NUL in a UTF-8 database (a jsonb string holds the same characters), else
 * as "body_base64" (standard alphabet, padded, no line breaks): either way a
 * replay gives back the same bytes.  22023 for a status outside 100-999 or
 * headers a replay cannot send (check_headers).
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
	check_headers(headers);

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
