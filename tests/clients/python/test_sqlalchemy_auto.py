"""SQLAlchemy 2 with automatic keys: metadata.create_all() on a database whose
snowflake_id.auto_keys lists public, then the ORM, with a model that declares a plain
autoincrement key (BIGSERIAL). Then the two traps its own suite found: a table with
implicit_returning=False asks for the key's sequence by name (gone: the error's hint names the
fix, and the fix works), and an Integer foreign key to a snowflake key (snowflake_check_columns()
names it; the first reference to a new key fails; BigInteger works)."""
import sqlalchemy
from sqlalchemy import BigInteger, ForeignKey, Integer, create_engine, func, text
from sqlalchemy.exc import DataError, ProgrammingError
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


class NarrowLine(Base):
    """A foreign key declared Integer, to a BigInteger key."""
    __tablename__ = "narrow_lines"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    order_id: Mapped[int] = mapped_column(Integer, ForeignKey("orders.id"))


class Line(Base):
    __tablename__ = "lines"
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    order_id: Mapped[int] = mapped_column(BigInteger, ForeignKey("orders.id"))  # as wide as the key


class Audit(Base):
    """Without RETURNING, SQLAlchemy fetches the key first: from the sequence it assumes."""
    __tablename__ = "audits"
    __table_args__ = {"implicit_returning": False}
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True)
    what: Mapped[str]


# region: no-returning
class Event(Base):
    __tablename__ = "events"
    __table_args__ = {"implicit_returning": False}
    # Fetched first with SELECT snowflake_nextval(), then inserted: no sequence asked for.
    id: Mapped[int] = mapped_column(BigInteger, primary_key=True, default=func.snowflake_nextval())
    what: Mapped[str]
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

# implicit_returning=False: the sequence SQLAlchemy names is gone; the error says why and what to
# declare, and the model that declares it inserts.
with Session(engine) as session:
    session.add(Audit(what="login"))
    try:
        session.flush()
        raise AssertionError("an insert without RETURNING found a sequence")
    except ProgrammingError as error:
        diag = error.orig.diag
        same(error.orig.sqlstate, "42P01", "the missing sequence's error")
        if "audits_id_seq" not in diag.message_primary or "default=func.snowflake_nextval()" not in (diag.message_hint or ""):
            raise AssertionError(f"the error names no fix: {diag.message_primary} / {diag.message_hint}")
with Session(engine) as session:
    event = Event(what="login")
    session.add(event)
    session.flush()
    same(session.scalar(text("SELECT snowflake_shard(id) FROM events")), 4, "the event's key")
    same(session.scalar(text("SELECT id FROM events")), event.id, "the event's key read back")
    session.commit()

# An Integer foreign key to the snowflake key: named by the check; fails at the first reference;
# a BigInteger one works.
with Session(engine) as session:
    order_key = session.scalar(text("SELECT id FROM orders WHERE customer = 'ada'"))
    findings = session.execute(text("SELECT tbl::text, col, finding FROM snowflake_check_columns() "
                                    "WHERE finding LIKE 'reference%'")).all()
    same(findings, [("narrow_lines", "order_id", "reference too narrow")], "what snowflake_check_columns() finds")
    session.add(NarrowLine(order_id=order_key))
    try:
        session.flush()
        raise AssertionError("a snowflake ID fitted into an integer foreign key")
    except DataError as error:
        same(error.orig.sqlstate, "22003", "the narrow foreign key's error")
with Session(engine) as session:
    session.add(Line(order_id=order_key))
    session.commit()
    same(session.scalar(text("SELECT order_id FROM lines")), order_key, "the line's order")

print(f"SQLAlchemy {sqlalchemy.__version__}: create_all made a BIGSERIAL key that auto_keys turned "
      f"into DEFAULT snowflake_nextval(); 1,001 objects flushed in {len(inserts)} INSERT(s), "
      f"snowflake keys of shard 4 as stored, increasing; implicit_returning=False told to "
      f"declare default=func.snowflake_nextval(), and working with it; an Integer foreign key "
      f"named by snowflake_check_columns() and failing with 22003, a BigInteger one working")
