// Whether an Express request has a body that nothing read before the
// middleware (no body parser, or none for its content type): its
// fingerprint would then not cover the body, and another body under the
// same key would be replayed instead of answered 422.
export function unreadBody(req) {
  const length = req.headers['content-length'];
  const hasBody = req.headers['transfer-encoding'] !== undefined || (length !== undefined && Number(length) > 0);
  // body-parser marks a body it read with _body; any reader ends the stream
  return hasBody && req._body !== true && !req.readableEnded;
}

// -> whether the declared length is over limit (checked before the claim)
export function declaredOver(headers, limit) {
  const length = headers['content-length'];
  return length !== undefined && Number(length) > limit;
}
