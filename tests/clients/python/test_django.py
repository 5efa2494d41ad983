"""Django: the recipes of docs/clients/python.md, run against a server with the extension, on each
Django version the docs name (tests/clients/run.sh runs it in one virtualenv per version)."""
import json
import os

import django
from django.conf import settings

settings.configure(
    DATABASES={"default": {
        "ENGINE": "django.db.backends.postgresql",
        "NAME": os.environ["PGDATABASE"], "HOST": os.environ["PGHOST"],
        "PORT": os.environ["PGPORT"], "USER": os.environ["PGUSER"],
    }},
    USE_TZ=True,
)
django.setup()

from django.db import connection, models  # noqa: E402
from django.db.models import F, Func, Value  # noqa: E402

from check import increasing, same  # noqa: E402


# region: model
class Order(models.Model):
    id = models.BigIntegerField(
        primary_key=True,
        db_default=Func(Value(4), function="snowflake_nextval",
                        output_field=models.BigIntegerField()),
    )
    customer = models.TextField()
    # endregion

    class Meta:
        app_label = "shop"


with connection.schema_editor() as editor:  # what `migrate` does with the model's migration
    editor.create_model(Order)
same(connection.introspection.get_table_description(connection.cursor(), "shop_order")[0].default,
     "snowflake_nextval(4)", "the column's DEFAULT")

customers = [f"customer {i}" for i in range(1000)]

# region: insert
order = Order.objects.create(customer="ada")  # order.id: the generated key, read back
# endregion
same(Order.objects.get(customer="ada").id, order.id, "key read back vs stored")
same(type(order.id), int, "type of the key")

# What bulk_create does with keys from db_default depends on the version: 5.2 leaves a
# placeholder (DatabaseDefault) in place of each key, 6.1 reads them back.
plain = Order.objects.bulk_create([Order(customer=f"plain {i}") for i in range(100)])
bulk_fills_keys = isinstance(plain[0].id, int)
if bulk_fills_keys:
    increasing([o.id for o in plain], 100, "bulk_create's keys")
    same({o.customer: o.id for o in plain},
         dict(Order.objects.filter(customer__startswith="plain ").values_list("customer", "id")),
         "bulk_create's keys vs stored")
else:
    same({type(o.id).__name__ for o in plain}, {"DatabaseDefault"}, "bulk_create's keys")
same(bulk_fills_keys, django.VERSION >= (6, 1), f"Django {django.__version__}: bulk_create fills keys")

# region: batch
with connection.cursor() as cursor:  # the keys first, then the rows with them: every version
    cursor.execute("SELECT snowflake_nextval(4) FROM generate_series(1, %s)", [len(customers)])
    ids = [row[0] for row in cursor.fetchall()]
orders = Order.objects.bulk_create(
    [Order(id=id, customer=customer) for id, customer in zip(ids, customers)])
# endregion
increasing([o.id for o in orders], len(customers), "keys drawn first")
same({o.customer: o.id for o in orders},
     dict(Order.objects.filter(customer__startswith="customer ").values_list("customer", "id")),
     "keys drawn first vs stored")

# region: decode
decoded = Order.objects.annotate(
    shard=Func(F("id"), function="snowflake_shard", output_field=models.IntegerField()),
    ts=Func(F("id"), function="snowflake_timestamp", output_field=models.DateTimeField()),
).get(id=order.id)  # decoded.shard an int, decoded.ts an aware datetime
# endregion
same(decoded.shard, 4, "decoded shard")
with connection.cursor() as cursor:
    cursor.execute("SELECT snowflake_timestamp(%s)", [order.id])
    same(decoded.ts, cursor.fetchone()[0], "decoded timestamp")

# region: json
body = json.dumps({"id": str(order.id), "customer": order.customer})  # the ID as text
# endregion
same(json.loads(body)["id"], str(order.id), "ID through JSON as text")

print(f"Django {django.__version__}: create() reads the key back; bulk_create "
      f"{'fills in' if bulk_fills_keys else 'leaves a DatabaseDefault in place of the'} keys from db_default; "
      f"{len(orders)} keys drawn first, increasing, as stored; decoded shard 4; JSON as text")
