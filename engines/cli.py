"""The ``engines`` command line (Typer).

Data goes to stdout, progress and logs to stderr. Expected failures
(:class:`store.errors.UserError`) print one line ``error: ...`` and exit non-zero;
tracebacks are for bugs only. Command groups live in ``engines.commands.*`` and are
listed in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import importlib
import sys

import typer
from typer.core import TyperGroup

from store.errors import UserError

# Each module defines register(app: typer.Typer). Order = order in --help.
COMMAND_MODULES = (
    "engines.commands.core",
    "engines.commands.score",
    "engines.commands.emulate",
    "engines.commands.report",
    "engines.commands.demo",
    "engines.commands.run",
    "engines.commands.crawl",
    "engines.commands.drift",
    "engines.commands.bundle",
)


class _Group(TyperGroup):
    def invoke(self, ctx):  # noqa: ANN001, ANN201
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"error: {exc.message}", err=True)
            raise typer.Exit(exc.exit_code) from None


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    help="Compare Lean 4 / Mathlib search engines: crawl politely, cache everything, score with one scorer.",
)


@app.callback()
def _root(
    ctx: typer.Context,
    db: str | None = typer.Option(
        None, "--db", envvar="ENGINES_DATABASE_URL", show_envvar=True,
        help="Database URL (default sqlite:///cache.db in the working directory).",
    ),
) -> None:
    ctx.ensure_object(dict)
    ctx.obj["db_url"] = db


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def main() -> None:
    app(prog_name="engines")


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
