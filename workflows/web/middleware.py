"""Refuse oversized request bodies before anything reads them."""

from django.conf import settings
from django.http import HttpResponse, JsonResponse
from django.http.multipartparser import MultiPartParserError


class RequestSizeLimit:
    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        try:
            length = int(request.META.get("CONTENT_LENGTH") or 0)
        except ValueError:
            return HttpResponse("Invalid Content-Length.", status=400, content_type="text/plain")
        limit = settings.DATA_UPLOAD_MAX_MEMORY_SIZE
        if length > limit:
            message = f"The request body is larger than {limit} bytes."
            if request.path.startswith("/api/"):
                return JsonResponse({"error": {"code": "too_large", "message": message}}, status=413)
            return HttpResponse(message, status=413, content_type="text/plain")
        return self.get_response(request)


class RefuseUnstorableText:
    """Refuse a NUL character anywhere in the path, query string, form fields
    or cookies with a 400, before any view runs.

    PostgreSQL text cannot hold NUL: a filter, a lookup or a saved form field
    carrying one would fail inside the database, as a server error, on one of
    the two supported databases and not the other. (Invalid UTF-8 cannot get
    this far: Django decodes it to U+FFFD.) The API's JSON bodies are checked
    by its parser, which names the field. Form fields are checked only
    outside the API: its views never read them, and parsing a multipart
    form there would leave the raw body unreadable.
    """

    def __init__(self, get_response):
        self.get_response = get_response

    def __call__(self, request):
        texts = [request.path, *_texts(request.GET), *_texts(request.COOKIES)]
        if not request.path.startswith("/api/") and request.method == "POST":
            try:
                texts += _texts(request.POST)
            except MultiPartParserError as exc:
                return HttpResponse(f"The form could not be read: {exc}", status=400, content_type="text/plain")
        if any("\x00" in text for text in texts):
            message = "The request contains a NUL character, which no field accepts."
            if request.path.startswith("/api/"):
                return JsonResponse({"error": {"code": "invalid", "message": message}}, status=400)
            return HttpResponse(message, status=400, content_type="text/plain")
        return self.get_response(request)


def _texts(data) -> list[str]:
    if hasattr(data, "lists"):
        return [text for key, values in data.lists() for text in (key, *values)]
    return [text for pair in data.items() for text in pair]
