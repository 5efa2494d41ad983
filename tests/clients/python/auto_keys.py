"""What the recipes with automatic keys share: the database's settings, made the way a
database's owner and a superuser make them, and what the migrated key must look like."""
import os

import psycopg

from check import same


def set_up_database():
    """snowflake_id.auto_keys for the database (its owner may set it), and its default shard
    (a superuser's setting); new sessions of the database take both."""
    database = os.environ["PGDATABASE"]
    with psycopg.connect("", autocommit=True) as conn:
        # region: settings
        conn.execute(f'ALTER DATABASE "{database}" SET snowflake_id.auto_keys = public')
        conn.execute(f'ALTER DATABASE "{database}" SET snowflake_id.shard = 4')
        # endregion


def check_key(table, column="id"):
    """The key the migration made: DEFAULT snowflake_nextval(), no identity, no sequence."""
    with psycopg.connect("") as conn:
        row = conn.execute(
            """SELECT pg_get_expr(d.adbin, d.adrelid), a.attidentity, pg_get_serial_sequence(%s, %s),
                      format_type(a.atttypid, a.atttypmod)
               FROM pg_attribute a JOIN pg_attrdef d ON d.adrelid = a.attrelid AND d.adnum = a.attnum
               WHERE a.attrelid = %s::regclass AND a.attname = %s""",
            [table, column, table, column]).fetchone()
    same(row, ("snowflake_nextval()", "", None, "bigint"), f"{table}.{column} after the migration")
