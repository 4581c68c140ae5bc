/*
 * fingerprint.c
 *	  idem_fingerprint(jsonb): SHA-256 of a canonical form of a request body,
 *	  so that a retry with the same meaning but another spelling matches.
 *
 * The canonical form is a type-tagged, length-prefixed walk of the jsonb
 * value.  jsonb already fixes object key order (by length, then bytes),
 * white space and duplicate keys (last wins); numbers are written in
 * numeric's normalized form, so 1, 1.0, 1e0 and 1.00 are one number.
 */
#include "postgres.h"

#include "common/cryptohash.h"
#include "common/sha2.h"
#include "fmgr.h"
#include "port/pg_bswap.h"
#include "utils/builtins.h"
#include "utils/jsonb.h"
#include "utils/numeric.h"

/* Feed len bytes of data to the SHA-256 context */
static void
digest_bytes(pg_cryptohash_ctx *ctx, const void *data, size_t len)
{
	if (pg_cryptohash_update(ctx, data, len) < 0)
		elog(ERROR, "could not update SHA-256 context: %s",
			 pg_cryptohash_error(ctx));
}

/* tag byte, then a 32-bit big-endian length or count */
static void
hash_header(pg_cryptohash_ctx *ctx, char tag, uint32 n)
{
	uint32		be = pg_hton32(n);

	digest_bytes(ctx, &tag, 1);
	digest_bytes(ctx, &be, sizeof(be));
}

static void
hash_scalar(pg_cryptohash_ctx *ctx, JsonbValue *v)
{
	switch (v->type)
	{
		case jbvNull:
			hash_header(ctx, 'z', 0);
			break;
		case jbvBool:
			hash_header(ctx, v->val.boolean ? 't' : 'f', 0);
			break;
		case jbvString:
			hash_header(ctx, 's', v->val.string.len);
			digest_bytes(ctx, v->val.string.val, v->val.string.len);
			break;
		case jbvNumeric:
			{
				char	   *digits = numeric_normalize(v->val.numeric);

				hash_header(ctx, 'n', strlen(digits));
				digest_bytes(ctx, digits, strlen(digits));
				pfree(digits);
				break;
			}
		default:
			elog(ERROR, "unexpected jsonb scalar type %d", (int) v->type);
	}
}

/*
 * idem_fingerprint(body jsonb) RETURNS bytea
 *	  32-byte SHA-256 of the canonical form of body (PostgreSQL's own
 *	  cryptohash).  NULL body raises 22004: a silent NULL fingerprint would
 *	  skip the key-reuse check.
 */
PG_FUNCTION_INFO_V1(idem_fingerprint);
Datum
idem_fingerprint(PG_FUNCTION_ARGS)
{
	Jsonb	   *body;
	JsonbIterator *it;
	JsonbValue	v;
	JsonbIteratorToken tok;
	pg_cryptohash_ctx *ctx;
	bytea	   *digest;

	if (PG_ARGISNULL(0))
		ereport(ERROR,
				errcode(ERRCODE_NULL_VALUE_NOT_ALLOWED),
				errmsg("body of idem_fingerprint must not be null"),
				errhint("Fingerprint the request body as sent, for example '{}' for an empty one."));
	body = PG_GETARG_JSONB_P(0);

	ctx = pg_cryptohash_create(PG_SHA256);
	if (pg_cryptohash_init(ctx) < 0)
		elog(ERROR, "could not initialize SHA-256 context: %s",
			 pg_cryptohash_error(ctx));

	it = JsonbIteratorInit(&body->root);
	while ((tok = JsonbIteratorNext(&it, &v, false)) != WJB_DONE)
	{
		switch (tok)
		{
			case WJB_BEGIN_ARRAY:
				/* a top-level scalar comes wrapped in a one-element array */
				if (!v.val.array.rawScalar)
					hash_header(ctx, '[', v.val.array.nElems);
				break;
			case WJB_BEGIN_OBJECT:
				hash_header(ctx, '{', v.val.object.nPairs);
				break;
			case WJB_KEY:
				hash_header(ctx, 'k', v.val.string.len);
				digest_bytes(ctx, v.val.string.val, v.val.string.len);
				break;
			case WJB_VALUE:
			case WJB_ELEM:
				hash_scalar(ctx, &v);
				break;
			case WJB_END_ARRAY:
			case WJB_END_OBJECT:
				/* counts in the headers already close each container */
				break;
			default:
				elog(ERROR, "unexpected jsonb iterator token %d", (int) tok);
		}
	}

	digest = palloc(VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	SET_VARSIZE(digest, VARHDRSZ + PG_SHA256_DIGEST_LENGTH);
	if (pg_cryptohash_final(ctx, (uint8 *) VARDATA(digest), PG_SHA256_DIGEST_LENGTH) < 0)
		elog(ERROR, "could not finalize SHA-256 context: %s",
			 pg_cryptohash_error(ctx));
	pg_cryptohash_free(ctx);

	PG_FREE_IF_COPY(body, 0);
	PG_RETURN_BYTEA_P(digest);
}
