"""The test's stand-in for authentication: the user's name from
"Authorization: Bearer NAME" (an application has its own)."""


class BearerPrincipal:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        auth = request.headers.get("Authorization", "")
        request.principal = auth[len("Bearer "):] if auth.startswith("Bearer ") else None
        return self.get_response(request)
