"""What every Python recipe asserts, shared: keys read back equal the stored ones, batch keys
are distinct and increasing, decoded parts agree with the server's scalar decoders."""


def same(got, want, what):
    if got != want:
        raise AssertionError(f"{what}: got {got!r}, want {want!r}")


def increasing(ids, n, what):
    same(len(ids), n, f"{what}: number of keys")
    same(len(set(ids)), n, f"{what}: distinct keys")
    if any(a >= b for a, b in zip(ids, ids[1:])):
        raise AssertionError(f"{what}: keys not increasing: {ids[:5]}...")


def insert_statements(engine):
    """The INSERT statements a SQLAlchemy engine sends from now on, as a list that grows."""
    from sqlalchemy import event

    inserts = []

    @event.listens_for(engine, "before_cursor_execute")
    def count_inserts(conn, cursor, statement, parameters, context, executemany):
        if statement.startswith("INSERT"):
            inserts.append(statement)

    return inserts


def doubles_changed(ids):
    """How many of the IDs a double (JavaScript's Number, JSON read by a browser) changes."""
    return sum(1 for i in ids if int(float(i)) != i)
