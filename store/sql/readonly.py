"""The read-only side of the cache: what ``engines sql`` may run, on both backends.

PostgreSQL: a role ``engines_reader`` (NOLOGIN, no attributes, member of nothing) gets
USAGE on the project's schema and SELECT on its tables and views, and owns one
``SECURITY DEFINER`` function, ``engines_sql_select(query, max_rows, columns_only)``,
that runs the user's query wrapped as a subquery. The statement therefore runs with
the reader's rights alone, however privileged the connecting user is: inside a
security-definer function PostgreSQL refuses ``SET ROLE`` / ``set_config('role' |
'session_authorization', ...)``, so a query cannot switch back; ``COPY``, ``DO`` and
data-modifying ``WITH`` are not valid inside a subquery; server-file and large-object
functions need rights the reader does not have; and the caller wraps the call in a
``READ ONLY`` transaction with a ``statement_timeout``. ``setup_reader()`` is
idempotent (migration 0004 and ``engines db reader`` call it): the role is
cluster-global and created only when missing, never dropped; grants are per schema.

SQLite: :func:`sqlite_connect_read_only` opens the file with URI ``mode=ro`` and an
authorizer that allows reading (SELECT, column reads, functions other than
``load_extension``, read-only PRAGMAs) and denies everything else, including ATTACH
(which ``VACUUM INTO`` needs) and PRAGMAs that set a value.
"""

from __future__ import annotations

import sqlite3
from pathlib import Path

import sqlalchemy as sa

READER_ROLE = "engines_reader"
FUNCTION = "engines_sql_select"
FUNCTION_SIG = f"{FUNCTION}(text, integer, boolean)"

# What the wrapper refuses (a case-insensitive regular expression on the query text): calls
# that take advisory locks, notify or sleep (granted to PUBLIC, so the reader's rights do
# not stop them), unicode-escaped identifiers (U&"...") that could spell one, and the
# functions that run a query given as a string (query_to_xml and its kin, cursor_to_xml,
# ts_stat, ts_rewrite), in which such a call could hide (migration 0010). Whatever a query
# still takes ends with its session, which engines sql closes after every query (and
# ends from outside at --timeout); no engines command waits for a lock a reader can take.
DISTURBING = (r"(pg_(try_)?advisory[a-z_]*|pg_notify|pg_sleep[a-z_]*|u&\"|query_to_xml[a-z_]*|"
              r"cursor_to_xml[a-z_]*|\mts_stat\M|\mts_rewrite\M)")
# A lock the query waits for (a migration's ACCESS EXCLUSIVE) fails after this long.
LOCK_TIMEOUT = "2s"
# One cell of a row the wrapper returns: longer text or JSON values are cut to the number of
# characters the caller sets in CELL_SETTING for its transaction (engines sql: --max-width,
# at most MAX_CELL_CHARS; CELL_CHARS when unset), so the client never receives a gigabyte
# from repeat('x', 1e9); a row whose cells are many and long has each cut so the row stays
# near ROW_CHARS.
CELL_SETTING = "engines.cell_chars"
CELL_CHARS = 65536
MAX_CELL_CHARS = 16 * 2**20
ROW_CHARS = 32 * 2**20

FIX_HINT = (
    f"run `engines db reader` (or `engines db upgrade`) as a user that may create roles, "
    f"or have an administrator run: CREATE ROLE {READER_ROLE} NOLOGIN; then `engines db reader`"
)


def _ident(name: str) -> str:
    return '"' + name.replace('"', '""') + '"'


def setup_reader(conn: sa.Connection) -> str | None:
    """Create (if missing) the reader role, grant it read access to the current schema and
    (re)create the query function it owns. Returns None on success, else why it could not
    (e.g. no right to create roles); the caller's transaction is left usable either way.
    PostgreSQL only."""
    if conn.dialect.name != "postgresql":
        return None
    schema = conn.exec_driver_sql("SELECT current_schema()").scalar()
    if schema is None:
        return "no current schema (search_path is empty)"
    s = _ident(schema)
    try:
        with conn.begin_nested():
            # Concurrent creators (several databases migrating at once) race on the
            # cluster-global role: whoever loses sees it existing, which is fine.
            conn.exec_driver_sql(f"""
DO $$
BEGIN
  IF NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = '{READER_ROLE}') THEN
    BEGIN
      CREATE ROLE {READER_ROLE} NOLOGIN NOSUPERUSER NOCREATEDB NOCREATEROLE NOINHERIT NOREPLICATION NOBYPASSRLS;
    EXCEPTION WHEN duplicate_object OR unique_violation THEN NULL;
    END;
  END IF;
END $$""")
            conn.exec_driver_sql(f"GRANT USAGE ON SCHEMA {s} TO {READER_ROLE}")
            conn.exec_driver_sql(f"GRANT SELECT ON ALL TABLES IN SCHEMA {s} TO {READER_ROLE}")
            # Tables and views that later migrations create in this schema are readable too.
            conn.exec_driver_sql(f"ALTER DEFAULT PRIVILEGES IN SCHEMA {s} GRANT SELECT ON TABLES TO {READER_ROLE}")
            # The query is spliced in as a subquery: only a query (SELECT, WITH, VALUES,
            # TABLE) parses there. The newline before ")" ends a trailing "--" comment.
            conn.exec_driver_sql(f"""
CREATE OR REPLACE FUNCTION {s}.{FUNCTION}(q text, max_rows integer, columns_only boolean)
RETURNS SETOF text
LANGUAGE plpgsql
SECURITY DEFINER
SET search_path = {s}, pg_catalog, pg_temp
SET lock_timeout = '{LOCK_TIMEOUT}'
AS $fn$
DECLARE
  lim integer := least(greatest(coalesce(nullif(current_setting('{CELL_SETTING}', true), '')::integer,
                                         {CELL_CHARS}), 1), {MAX_CELL_CHARS});
BEGIN
  IF q ~* '{DISTURBING}' THEN
    RAISE EXCEPTION 'engines sql: % is not allowed: lock, notify and sleep calls (and queries run from a string) could disturb other sessions',
      substring(lower(q) from '{DISTURBING}') USING ERRCODE = '42501';
  END IF;
  IF columns_only THEN
    RETURN QUERY EXECUTE format(
      'SELECT row_to_json(z)::text FROM (SELECT t.* FROM (SELECT 1) AS d '
      'LEFT JOIN (SELECT * FROM (%s' || chr(10) || ') AS s LIMIT 0) AS t ON true) AS z', q);
  ELSE
    -- A row longer than lim has each long cell cut (text values keep their start), to lim
    -- characters, or fewer when the row has many cells (ROW_CHARS shared between them).
    RETURN QUERY EXECUTE format(
      'SELECT CASE WHEN length(j) <= %s THEN j ELSE (SELECT json_object_agg(e.key, CASE '
      'WHEN length(e.value::text) <= c.lim THEN e.value '
      'WHEN json_typeof(e.value) = ''string'' THEN to_json(left(e.value #>> ''{{}}'', c.lim) || ''…'') '
      'ELSE to_json(''[cut: '' || length(e.value::text) || '' characters]'') END)::text '
      'FROM json_each(j::json) AS e, (SELECT least(%s, greatest(64, (%s / count(*))::integer)) AS lim '
      'FROM json_each(j::json)) AS c) END '
      'FROM (SELECT row_to_json(t)::text AS j FROM (%s' || chr(10) || ') AS t LIMIT %s) AS r',
      lim, lim, {ROW_CHARS}, q, max_rows + 1);
  END IF;
END
$fn$""".replace("%", "%%"))  # the driver's paramstyle: %% is a literal %
            conn.exec_driver_sql(f"ALTER FUNCTION {s}.{FUNCTION_SIG} OWNER TO {READER_ROLE}")
            conn.exec_driver_sql(f"REVOKE ALL ON FUNCTION {s}.{FUNCTION_SIG} FROM PUBLIC")
            conn.exec_driver_sql(f"GRANT EXECUTE ON FUNCTION {s}.{FUNCTION_SIG} TO CURRENT_USER")
    except sa.exc.DBAPIError as exc:
        return str(exc.orig).strip().splitlines()[0] if exc.orig is not None else str(exc)
    return None


def reader_problem(conn: sa.Connection) -> str | None:
    """Why the reader function cannot be trusted here (None: it can).

    The function must exist in the search path, be SECURITY DEFINER and be owned by a
    role that is not a superuser, cannot bypass row security and is a member of no
    role (so no inherited rights such as pg_read_server_files).
    """
    row = conn.exec_driver_sql(
        "SELECT p.prosecdef, r.rolname, r.rolsuper, r.rolbypassrls, "
        "EXISTS (SELECT 1 FROM pg_auth_members m WHERE m.member = r.oid) "
        "FROM pg_proc p JOIN pg_roles r ON r.oid = p.proowner "
        f"WHERE p.oid = to_regprocedure('{FUNCTION_SIG}')"
    ).first()
    if row is None:
        return f"this database has no read-only function for engines sql ({FUNCTION}, owned by {READER_ROLE})"
    secdef, owner, superuser, bypass, member = row
    if not secdef or owner != READER_ROLE or superuser or bypass or member:
        return (f"the function {FUNCTION} is not a security-definer function of a plain {READER_ROLE} role "
                f"(owner {owner}, superuser {superuser}, bypassrls {bypass}, member of a role {member})")
    return None


# ------------------------------------------------------------------------ SQLite

# PRAGMAs that only read. Those taking a table / index name are safe with an argument;
# the others only without one ("PRAGMA user_version = 5" sets it).
_PRAGMA_NAME_ARG = {
    "table_info", "table_xinfo", "index_list", "index_info", "index_xinfo", "foreign_key_list",
    "foreign_key_check", "table_list", "integrity_check", "quick_check",
}
_PRAGMA_NO_ARG = {
    "user_version", "schema_version", "application_id", "journal_mode", "page_size", "page_count",
    "freelist_count", "encoding", "compile_options", "database_list", "collation_list", "function_list",
    "module_list", "pragma_list", "foreign_keys", "data_version", "auto_vacuum", "busy_timeout",
    "cache_size", "query_only", "synchronous", "max_page_count",
}
_DENIED_FUNCTIONS = {"load_extension", "fts3_tokenizer", "readfile", "writefile", "edit"}


class SqliteRefused(Exception):
    """The authorizer denied something; ``reason`` names it."""


def _authorizer(denied: list[str]):
    def check(action: int, arg1, arg2, _db, _source) -> int:  # noqa: ANN001
        if action in (sqlite3.SQLITE_SELECT, sqlite3.SQLITE_READ, sqlite3.SQLITE_RECURSIVE):
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_FUNCTION:
            if (arg2 or "").lower() in _DENIED_FUNCTIONS:
                denied.append(f"function {arg2}()")
                return sqlite3.SQLITE_DENY
            return sqlite3.SQLITE_OK
        if action == sqlite3.SQLITE_PRAGMA:
            name = (arg1 or "").lower()
            if name in _PRAGMA_NAME_ARG or (name in _PRAGMA_NO_ARG and arg2 is None):
                return sqlite3.SQLITE_OK
            denied.append(f"PRAGMA {arg1}" + (f" = {arg2}" if arg2 is not None else ""))
            return sqlite3.SQLITE_DENY
        if action == sqlite3.SQLITE_UPDATE and arg1 == "sqlite_master" and _db == "main":
            # SQLite's own bookkeeping when a table-valued PRAGMA is first used; the file
            # is opened mode=ro, so no write can reach it anyway.
            return sqlite3.SQLITE_OK
        names = {sqlite3.SQLITE_ATTACH: "ATTACH (also used by VACUUM INTO)", sqlite3.SQLITE_DETACH: "DETACH",
                 sqlite3.SQLITE_INSERT: "INSERT", sqlite3.SQLITE_UPDATE: "UPDATE", sqlite3.SQLITE_DELETE: "DELETE",
                 sqlite3.SQLITE_TRANSACTION: "transaction control", sqlite3.SQLITE_ANALYZE: "ANALYZE",
                 sqlite3.SQLITE_REINDEX: "REINDEX", sqlite3.SQLITE_SAVEPOINT: "SAVEPOINT"}
        denied.append(names.get(action, f"a statement that changes the database (action {action})"))
        return sqlite3.SQLITE_DENY

    return check


def sqlite_connect_read_only(path: str | Path, denied: list[str], timeout: float = 30) -> sqlite3.Connection:
    """A read-only connection to an existing SQLite file; ``denied`` collects refusals;
    ``timeout``: how long to wait for another process's lock."""
    from store.db import sqlite_read_only, sqlite_read_only_uri

    path = Path(path)
    # A file that cannot be written (or a read-only mount) is opened immutable: mode=ro alone
    # would still need a -shm file beside a WAL database, and could not create one there.
    uri = sqlite_read_only_uri(path) if sqlite_read_only(path) else path.resolve().as_uri() + "?mode=ro"
    conn = sqlite3.connect(uri, uri=True, isolation_level=None, timeout=timeout)
    conn.set_authorizer(_authorizer(denied))
    return conn
