from django.urls import path

from . import views

urlpatterns = [path(p.lstrip("/"), v) for p, v in views.ROUTES.items()]
