import os

from django.core.wsgi import get_wsgi_application

from instances.memory import freeze_startup_objects

os.environ.setdefault("DJANGO_SETTINGS_MODULE", "zopday.settings")
application = get_wsgi_application()
freeze_startup_objects()
