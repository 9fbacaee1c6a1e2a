#!/usr/bin/env python
"""The test project's manage.py, as ``django-admin startproject`` writes it."""

import os
import sys

if __name__ == "__main__":
    os.environ.setdefault("DJANGO_SETTINGS_MODULE", "site_settings.settings")
    from django.core.management import execute_from_command_line

    execute_from_command_line(sys.argv)
