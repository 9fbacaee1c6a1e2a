"""The test project as a WSGI application (``manage.py runserver`` serves it)."""

from __future__ import annotations

import os

from django.core.wsgi import get_wsgi_application

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings.settings")
application = get_wsgi_application()
