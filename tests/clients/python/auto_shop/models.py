"""The app of test_django_auto.py: a model that says nothing about its key, and two models
that point at any object with a GenericForeignKey, one keeping the object's key in Django's
usual PositiveIntegerField (too narrow for a snowflake ID), one in a PositiveBigIntegerField."""
from django.contrib.contenttypes.fields import GenericForeignKey
from django.contrib.contenttypes.models import ContentType
from django.db import models


# region: model
class Order(models.Model):  # no key declared: Django adds id, a BigAutoField (DEFAULT_AUTO_FIELD)
    customer = models.TextField()
    # endregion

    class Meta:
        app_label = "auto_shop"


class NarrowComment(models.Model):
    """As Django's documentation writes a GenericForeignKey: its object_id is an integer."""
    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE)
    object_id = models.PositiveIntegerField()
    target = GenericForeignKey("content_type", "object_id")

    class Meta:
        app_label = "auto_shop"


# region: generic
class Comment(models.Model):
    content_type = models.ForeignKey(ContentType, on_delete=models.CASCADE)
    object_id = models.PositiveBigIntegerField()  # holds any table's key: a snowflake ID too
    target = GenericForeignKey("content_type", "object_id")
    # endregion

    class Meta:
        app_label = "auto_shop"
