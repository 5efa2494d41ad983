"""The app of test_django_auto.py: a model that says nothing about its key."""
from django.db import models


# region: model
class Order(models.Model):  # no key declared: Django adds id, a BigAutoField (DEFAULT_AUTO_FIELD)
    customer = models.TextField()
    # endregion

    class Meta:
        app_label = "auto_shop"
