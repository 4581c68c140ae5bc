"""The Django application the tests drive (the same routes as asgi_app):
run by Django's own server, `django-admin runserver`, with
DJANGO_SETTINGS_MODULE=django_orders.settings and IDEM_APP_DSN."""
