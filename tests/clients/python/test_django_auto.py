"""Django with automatic keys: `makemigrations` and `migrate` on a database whose
snowflake_id.auto_keys lists public, then create() and bulk_create() of a model that says
nothing about its key (auto_shop/models.py), on each Django version the docs name. Then a
GenericForeignKey to it: with Django's usual PositiveIntegerField, snowflake_check_columns()
names the column and its fix, and a comment on an order fails; with PositiveBigIntegerField,
it works."""
import os
import sys
import tempfile

from auto_keys import check_key, set_up_database
from check import increasing, same

set_up_database()

import django  # noqa: E402
from django.conf import settings  # noqa: E402
from django.core.management import call_command  # noqa: E402
from django.db import DataError, connection, transaction  # noqa: E402

# The migration is written by makemigrations into a package of its own, outside the checkout.
migrations = tempfile.mkdtemp()
os.makedirs(os.path.join(migrations, "auto_shop_migrations"))
open(os.path.join(migrations, "auto_shop_migrations", "__init__.py"), "w").close()
sys.path.insert(0, migrations)

settings.configure(
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["PGDATABASE"], "HOST": os.environ["PGHOST"],
        "PORT": os.environ["PGPORT"], "USER": os.environ["PGUSER"],
    }},
    INSTALLED_APPS=["django.contrib.contenttypes", "auto_shop"],
    MIGRATION_MODULES={"auto_shop": "auto_shop_migrations"},
    DEFAULT_AUTO_FIELD="django.db.models.BigAutoField",
    USE_TZ=True,
)
django.setup()

from auto_shop.models import Comment, NarrowComment, Order  # noqa: E402

call_command("makemigrations", "auto_shop", verbosity=0)
call_command("migrate", verbosity=0)
check_key("auto_shop_order")

# region: insert
order = Order.objects.create(customer="ada")  # order.id: a snowflake ID, read back
orders = Order.objects.bulk_create([Order(customer=f"customer {i}") for i in range(1000)])
# every orders[i].id filled in: Django reads back the keys of an AutoField
# endregion
same(Order.objects.get(customer="ada").id, order.id, "key read back vs stored")
increasing([o.id for o in orders], 1000, "bulk_create's keys")
same({o.customer: o.id for o in orders},
     dict(Order.objects.exclude(customer="ada").values_list("customer", "id")),
     "bulk_create's keys vs stored")
with connection.cursor() as cursor:
    cursor.execute("SELECT DISTINCT snowflake_shard(id) FROM auto_shop_order")
    same(cursor.fetchall(), [(4,)], "shards of the keys")
if order.id < 2 ** 53:
    raise AssertionError(f"key {order.id} is no snowflake ID")

# A GenericForeignKey keeps the target's key in object_id. The check names the narrow one, with
# its fix, and not the other; the narrow one fails at the first comment on a snowflake key.
with connection.cursor() as cursor:
    cursor.execute("SELECT tbl::text, col, finding, fix FROM snowflake_check_columns() "
                   "WHERE tbl::text LIKE 'auto_shop_%'")
    findings = cursor.fetchall()
same([row[:3] for row in findings],
     [("auto_shop_narrowcomment", "object_id", "generic reference too narrow")],
     "what snowflake_check_columns() finds")
if "PositiveBigIntegerField" not in findings[0][3]:
    raise AssertionError(f"the fix names no PositiveBigIntegerField: {findings[0][3]}")
try:
    with transaction.atomic():
        NarrowComment.objects.create(target=order)
    raise AssertionError("a snowflake ID fitted into an integer object_id")
except DataError as error:
    same(error.__cause__.sqlstate, "22003", "the narrow object_id's error")
# region: generic-use
comment = Comment.objects.create(target=order)  # object_id: the order's snowflake ID
same(Comment.objects.get(pk=comment.pk).target, order, "the comment's target read back")
# endregion

print(f"Django {django.__version__}: makemigrations and migrate made a BigAutoField key that "
      f"auto_keys turned into DEFAULT snowflake_nextval(); create() and bulk_create() read "
      f"back 1,001 snowflake keys of shard 4, increasing, as stored; a GenericForeignKey's "
      f"integer object_id named by snowflake_check_columns() and failing with 22003, a "
      f"PositiveBigIntegerField one holding the order's key")
