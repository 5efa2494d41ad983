"""psycopg 3: the reader and the outbox relay of docs/reading-in-order.md, run against a server
with the extension. A row whose transaction stays open while a later row commits is not skipped
(a reader without the horizon skips it: the trap is real); four writers holding their
transactions open for random times, some rolling back, and the reader reads every committed
row once, in increasing order; the relay delivers every message, and again after a crash
between publishing and committing its cursor (at least once)."""
import random
import threading
import time

import psycopg

from check import same


def connect(autocommit=True):
    return psycopg.connect("", autocommit=autocommit)  # PGHOST, PGDATABASE, ... from the environment


def strictly_increasing(ids, what):
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise AssertionError(f"{what}: not strictly increasing (a row read twice or out of order)")


# region: reader
def poll(conn, cursor, limit=1000):
    """The rows after `cursor` that no transaction can overtake any more, and the new cursor.
    Two statements on an autocommit connection: the horizon first, then the rows below it."""
    horizon = conn.execute("SELECT snowflake_horizon()").fetchone()[0]
    rows = conn.execute(
        "SELECT id, payload FROM events WHERE id > %s AND id < %s ORDER BY id LIMIT %s",
        [cursor, horizon, limit],
    ).fetchall()
    return rows, (rows[-1][0] if rows else cursor)
# endregion


def poll_until(conn, cursor, want, seconds=10):
    """Polls until `want` rows have been read (the horizon follows the clock: a few ms)."""
    read, deadline = [], time.monotonic() + seconds
    while len(read) < want and time.monotonic() < deadline:
        rows, cursor = poll(conn, cursor)
        read += rows
        if not rows:
            time.sleep(0.005)
    return read, cursor


with connect() as admin:
    admin.execute("""
        CREATE TABLE events (
            id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
            payload text NOT NULL
        )""")

# ---- The trap: 100 is taken first and commits last ------------------------------------------
with connect(autocommit=False) as slow, connect() as fast, connect() as reader:
    slow_id = slow.execute("INSERT INTO events (payload) VALUES ('slow') RETURNING id").fetchone()[0]
    fast_id = fast.execute("INSERT INTO events (payload) VALUES ('fast') RETURNING id").fetchone()[0]
    if not slow_id < fast_id:
        raise AssertionError("the first writer's ID is not the lower one")
    # Without the horizon the reader sees the later row alone, and its cursor passes the first.
    naive = [r[0] for r in reader.execute("SELECT id FROM events WHERE id > 0 ORDER BY id").fetchall()]
    same(naive, [fast_id], "a reader without the horizon, while the first writer is open")
    rows, cursor = poll(reader, 0)
    same(rows, [], "the reader, while the first writer is open (the horizon is held at its ID)")
    slow.commit()
    rows, cursor = poll_until(reader, cursor, 2)
    same([r[0] for r in rows], [slow_id, fast_id], "the reader, once the first writer committed")
    skipped = reader.execute("SELECT count(*) FROM events WHERE id > %s", [fast_id]).fetchone()[0]
    same(skipped, 0, "what the naive reader's next page (after its cursor) would find")

# ---- Four writers, open for random times, some rolling back; one reader -------------------
committed, lock, stop = [], threading.Lock(), threading.Event()


def writer(seed, insert="INSERT INTO events (payload) VALUES ('load') RETURNING id"):
    rng = random.Random(seed)
    with connect(autocommit=False) as conn:
        while not stop.is_set():
            ids = [conn.execute(insert).fetchone()[0] for _ in range(rng.randint(1, 5))]
            time.sleep(rng.random() * 0.02)  # the transaction stays open 0-20 ms
            if rng.random() < 0.1:
                conn.rollback()
            else:
                conn.commit()
                with lock:
                    committed.extend(ids)


threads = [threading.Thread(target=writer, args=(seed,)) for seed in range(4)]
read = []
with connect() as reader:
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 2.0
    while time.monotonic() < deadline:
        rows, cursor = poll(reader, cursor, limit=100)
        read += [r[0] for r in rows]
    stop.set()
    for thread in threads:
        thread.join()
    more, cursor = poll_until(reader, cursor, len(committed) - len(read))
    read += [r[0] for r in more]
strictly_increasing(read, "the reader's rows")
skipped, extra = set(committed) - set(read), set(read) - set(committed)
same((len(skipped), len(extra)), (0, 0), f"rows skipped and rows read but not committed, of {len(committed)}")
load = len(committed)

# ---- The outbox relay ---------------------------------------------------------------------
with connect() as admin:
    # region: outbox
    admin.execute("""
        CREATE TABLE outbox (
            id bigint PRIMARY KEY DEFAULT snowflake_nextval(4),
            payload jsonb NOT NULL
        );
        CREATE TABLE outbox_cursor (relay text PRIMARY KEY, last_id bigint NOT NULL);
        INSERT INTO outbox_cursor VALUES ('mail', 0);
        """)
    # endregion


# region: relay
def relay_once(conn, publish, limit=100):
    """One step of the relay: the next messages below the horizon are published, and the
    cursor moves in the same transaction. A crash after publishing and before the commit
    publishes them again: at least once (consumers drop an id they have seen)."""
    with conn.transaction():
        last_id = conn.execute(  # the lock: one relay at a time
            "SELECT last_id FROM outbox_cursor WHERE relay = 'mail' FOR UPDATE").fetchone()[0]
        horizon = conn.execute("SELECT snowflake_horizon()").fetchone()[0]
        batch = conn.execute(
            "SELECT id, payload FROM outbox WHERE id > %s AND id < %s ORDER BY id LIMIT %s",
            [last_id, horizon, limit],
        ).fetchall()
        for id, payload in batch:
            publish(id, payload)
        if batch:
            conn.execute("UPDATE outbox_cursor SET last_id = %s WHERE relay = 'mail'", [batch[-1][0]])
    return len(batch)
# endregion


sent = []


def publish(id, payload):
    sent.append(id)


class Crash(Exception):
    pass


def publish_then_crash(id, payload):
    publish(id, payload)
    raise Crash()


with connect() as writer_conn, connect() as relay:
    first = [writer_conn.execute("INSERT INTO outbox (payload) VALUES ('{}') RETURNING id").fetchone()[0]
             for _ in range(3)]
    time.sleep(0.01)
    try:
        relay_once(relay, publish_then_crash)  # publishes the first message, then dies
        raise AssertionError("the crash did not happen")
    except Crash:
        pass
    same(sent, first[:1], "published before the crash")
    same(relay.execute("SELECT last_id FROM outbox_cursor").fetchone()[0], 0, "the cursor after the crash")
    # Two writers go on while the relay runs; it delivers everything, the first message twice.
    committed.clear()
    stop.clear()
    threads = [threading.Thread(target=writer, args=(seed, "INSERT INTO outbox (payload) VALUES "
                                                           "('{\"load\": true}') RETURNING id"))
               for seed in range(4, 6)]
    for thread in threads:
        thread.start()
    deadline = time.monotonic() + 1.0
    while time.monotonic() < deadline:
        relay_once(relay, publish)
    stop.set()
    for thread in threads:
        thread.join()
    outbox = first + sorted(committed)
    deadline = time.monotonic() + 10
    while len(sent) - 1 < len(outbox) and time.monotonic() < deadline:
        if relay_once(relay, publish) == 0:
            time.sleep(0.005)
    same(sent[:2], first[:1] * 2, "the message published before the crash, published again")
    strictly_increasing(sent[1:], "the relay's messages after the crash")
    same(sent[1:], outbox, "messages relayed vs written (none skipped, none rolled back)")
    same(relay.execute("SELECT last_id FROM outbox_cursor").fetchone()[0], outbox[-1], "the relay's cursor")

print(f"psycopg {psycopg.__version__}: a row held open while a later one committed was read, "
      f"in order (a reader without the horizon skips it); {load} rows of 4 writers read once, "
      f"in order, as committed; the relay delivered {len(outbox)} messages, "
      f"the first again after a crash")
