"""SQLAlchemy 2 with automatic keys: metadata.create_all() on a database whose
snowflake_id.auto_keys lists public, then the ORM, with a model that declares a plain
autoincrement key (BIGSERIAL)."""
import sqlalchemy
from sqlalchemy import BigInteger, create_engine, text
from sqlalchemy.orm import DeclarativeBase, Mapped, Session, mapped_column

from auto_keys import check_key, set_up_database
from check import increasing, insert_statements, same

set_up_database()


# region: model
class Base(DeclarativeBase):
    pass


class Order(Base):
    __tablename__ = "orders"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)  # BIGSERIAL in the DDL
    customer: Mapped[str]
# endregion


engine = create_engine("postgresql+psycopg://")  # PGHOST, PGDATABASE, ... from the environment
Base.metadata.create_all(engine)  # CREATE TABLE orders (id BIGSERIAL NOT NULL, ..., PRIMARY KEY (id))
check_key("orders")
inserts = insert_statements(engine)


with Session(engine) as session:
    # region: insert
    order = Order(customer="ada")
    session.add(order)
    orders = [Order(customer=f"customer {i}") for i in range(1000)]
    session.add_all(orders)
    session.flush()  # order.id and every orders[i].id: snowflake IDs the server generated
    # endregion
    same(session.scalar(text("SELECT id FROM orders WHERE customer = 'ada'")), order.id,
         "key read back vs stored")
    increasing([o.id for o in orders], 1000, "flushed keys")
    stored = dict(session.execute(text("SELECT customer, id FROM orders")).all())
    stored.pop("ada")
    same({o.customer: o.id for o in orders}, stored, "keys of the objects vs stored")
    same(session.execute(text("SELECT DISTINCT snowflake_shard(id) FROM orders")).all(), [(4,)],
         "shards of the keys")
    session.commit()

print(f"SQLAlchemy {sqlalchemy.__version__}: create_all made a BIGSERIAL key that auto_keys turned "
      f"into DEFAULT snowflake_nextval(); 1,001 objects flushed in {len(inserts)} INSERT(s), "
      f"snowflake keys of shard 4 as stored, increasing")
