"""The JSON API under /api/v1/ (django-ninja). Endpoints check access through instances.access
and call the same services as the pages; `zopday/api.py` wires the routers together."""
