"""pgsched's tables belong to pgsched's own migrations, not to Django models. This module
makes ``pgsched.django`` an app with models as Django counts them, so that every
``manage.py migrate`` sends it ``post_migrate``, on which pgsched's migration upgrades the
tables to this version (``apps.py``)."""
