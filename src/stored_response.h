/*
 * stored_response.h
 *	  The stored form of an HTTP response (stored_response.c).
 */
#ifndef IDEMPOTENCY_STORED_RESPONSE_H
#define IDEMPOTENCY_STORED_RESPONSE_H

#include "utils/jsonb.h"

extern Jsonb *idem_stored_response(int32 status, Jsonb *headers, bytea *body);

#endif							/* IDEMPOTENCY_STORED_RESPONSE_H */
