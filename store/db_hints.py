"""What a database URL the user typed means, and what to do when its database is missing
(issue 34, item 13): a plain path is a SQLite file; a PostgreSQL database that does not
exist is one line saying how to create it."""

from __future__ import annotations

import re
import shlex

_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.-]*:")
# What a path to a SQLite file looks like: a name with a database suffix, or a path with a /.
_PLAIN_PATH = re.compile(r"[^\s:]*/[^\s:]*|[^\s:/]+\.(?:db|db3|sqlite|sqlite3)")


def is_plain_path(url: str) -> bool:
    """``cache.db``, ``/data/cache.db``, ``sub/x.sqlite``: a path, not a URL."""
    return bool(_PLAIN_PATH.fullmatch(url)) and not _SCHEME.match(url)


def plain_path_as_url(url: str) -> str:
    """A plain path as its ``sqlite:///`` URL; anything else unchanged."""
    return "sqlite:///" + url if is_plain_path(url) else url


def refuse_missing_pg_database(url, message: str, shown: str) -> None:
    """Raise the one line of :func:`missing_pg_database` when it applies."""
    from store.errors import DatabaseError

    missing = missing_pg_database(url, message, shown)
    if missing is not None:
        raise DatabaseError(missing) from None


def missing_pg_database(url, message: str, shown: str) -> str | None:
    """A PostgreSQL server that answered "database X does not exist": how to create it."""
    m = re.search(r'database "([^"]+)" does not exist', message)
    if url.get_backend_name() != "postgresql" or m is None:
        return None
    name = m.group(1)
    opts = " ".join(f"{flag} {shlex.quote(str(v))}" for flag, v in
                    (("-h", url.host), ("-p", url.port), ("-U", url.username)) if v)
    return (f"database {name!r} does not exist on the PostgreSQL server of {shown}: create it "
            f"with `createdb {opts} {shlex.quote(name)}`".replace("  ", " ")
            + f' (or `CREATE DATABASE "{name}";` in psql), then run the same command again')
