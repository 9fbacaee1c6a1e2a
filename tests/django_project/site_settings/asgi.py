"""The test project as an ASGI application (``uvicorn site_settings.asgi:application``)."""

from __future__ import annotations

import os

from django.core.asgi import get_asgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings.settings")
application = get_asgi_application()
