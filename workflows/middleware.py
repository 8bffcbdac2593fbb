"""Refuse oversized request bodies before anything reads them."""

from django.conf import settings
from django.http import HttpResponse, JsonResponse


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
