"""SQLAlchemy 2 ORM: the recipes of docs/clients/python.md, run against a server with the
extension."""
import json

import sqlalchemy
from sqlalchemy import BigInteger, create_engine, func, select, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from check import increasing, insert_statements, same

N = 1000


# region: model
class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(
        BigInteger, primary_key=True,
        # monotonic=True: the IDs increase in the order the rows are inserted, so one
        # INSERT ... RETURNING can take a whole batch (without it: one INSERT per row)
        server_default=func.snowflake_nextval(4, monotonic=True),
    )
    customer: Mapped[str]
# endregion


class OrderNotMonotonic(Base):
    """The same without monotonic=True, to show what it changes."""
    __tablename__ = "orders_not_monotonic"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True,
                                    server_default=func.snowflake_nextval(4))
    customer: Mapped[str]


engine = create_engine("postgresql+psycopg://")  # PGHOST, PGDATABASE, ... from the environment
Base.metadata.create_all(engine)
inserts = insert_statements(engine)


with Session(engine) as session:
    # region: insert
    order = Order(customer="ada")
    session.add(order)
    session.flush()  # order.id: the key the server generated, an int
    # endregion
    same(session.scalar(text("SELECT id FROM orders WHERE customer = 'ada'")), order.id,
         "key read back vs stored")

    inserts.clear()
    # region: batch
    orders = [Order(customer=f"customer {i}") for i in range(1000)]
    session.add_all(orders)
    session.flush()  # one INSERT ... RETURNING per batch: every order.id filled in
    # endregion
    batched = len(inserts)
    inserts.clear()
    plain_orders = [OrderNotMonotonic(customer=f"customer {i}") for i in range(N)]
    session.add_all(plain_orders)
    session.flush()
    unbatched = len(inserts)
    for model, objs in ((Order, orders), (OrderNotMonotonic, plain_orders)):
        ids = [o.id for o in objs]
        increasing(ids, N, f"{model.__name__}: flushed keys")
        stored = dict(session.execute(text(
            f"SELECT customer, id FROM {model.__tablename__}")).all())
        stored.pop("ada", None)
        same({o.customer: o.id for o in objs}, stored,
             f"{model.__name__}: keys of the objects vs stored")
    if not batched < 10 or unbatched != N:
        raise AssertionError(f"{N} objects: {batched} INSERTs with monotonic=True, "
                             f"{unbatched} without: batching not as documented")

    # region: decode
    decoded = session.execute(
        select(Order.id, func.snowflake_shard(Order.id).label("shard"),
               func.snowflake_timestamp(Order.id).label("ts")).where(Order.id == order.id)
    ).one()  # decoded.shard an int, decoded.ts a datetime (UTC)
    # endregion
    same(decoded.shard, 4, "decoded shard")
    same(decoded.ts, session.scalar(text("SELECT snowflake_timestamp(:id)"), {"id": order.id}),
         "decoded timestamp")

    # region: json
    body = json.dumps({"id": str(order.id), "customer": order.customer})  # the ID as text
    # endregion
    same(json.loads(body)["id"], str(order.id), "ID through JSON as text")
    session.commit()

print(f"SQLAlchemy {sqlalchemy.__version__}: {N} objects flushed in {batched} INSERT(s) with "
      f"monotonic=True, {unbatched} without; keys as stored, increasing; decoded shard 4; "
      f"JSON as text")
