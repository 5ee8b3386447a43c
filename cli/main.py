"""The ``engines`` command line (Typer).

Data goes to stdout, progress and logs to stderr. Expected failures
(:class:`store.errors.UserError`) print one line ``error: ...`` and exit non-zero;
tracebacks are for bugs only. Command groups live in ``cli.commands.*`` and are
listed in ``COMMAND_MODULES``.
"""

from __future__ import annotations

import functools
import importlib
import inspect
import os
import sys
from typing import Optional

import typer
from typer.core import TyperGroup

try:  # typer >= 0.2x vendors click as typer._click; older versions use click itself
    from typer._click import exceptions as _cx
except ImportError:  # pragma: no cover
    from click import exceptions as _cx

from cli.interrupts import watch as watch_interrupts
from store.errors import UserError

# Each module defines register(app: typer.Typer). Order = order in --help.
COMMAND_MODULES = (
    "cli.commands.core",
    "cli.commands.score",
    "cli.commands.emulate",
    "cli.commands.report",
    "cli.commands.plot",
    "cli.commands.demo",
    "cli.commands.run",
    "cli.commands.crawl",
    "cli.commands.engines_list",
    "cli.commands.reparse",
    "cli.commands.sql",
    "cli.commands.drift",
    "cli.commands.bundle",
    "cli.commands.publish",
)


DEBUG_ENV = "ENGINES_DEBUG"


def _one_line(text: str) -> str:
    return " ".join(str(text).split())


def unexpected_line(exc: BaseException) -> str:
    from store.db import machine_error  # a full disk, a corrupt or read-only database: not a bug

    known = machine_error(exc)
    if known is not None:
        return f"error: {_one_line(known.message)}"
    return (f"error: unexpected {type(exc).__name__}: {_one_line(exc)[:300]} "
            f"(a bug; set {DEBUG_ENV}=1 for the traceback and please report it)")


class _Group(TyperGroup):
    def invoke(self, ctx):  # noqa: ANN001, ANN201
        try:
            return super().invoke(ctx)
        except UserError as exc:
            typer.echo(f"error: {_one_line(exc.message)}", err=True)
            raise typer.Exit(exc.exit_code) from None
        except (_cx.ClickException, typer.Exit, typer.Abort):
            raise
        except KeyboardInterrupt:  # outside a command's own handling (cli.main._wrap_command)
            typer.echo("interrupted", err=True)
            raise typer.Exit(130) from None
        except Exception as exc:  # noqa: BLE001 - one line instead of a traceback, unless debugging
            if os.environ.get(DEBUG_ENV):
                raise
            typer.echo(unexpected_line(exc), err=True)
            raise typer.Exit(1) from None


app = typer.Typer(
    cls=_Group,
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    # Help texts are plain text: "hf://OWNER/DATASET@REVISION[/FILE]" is not markup.
    rich_markup_mode=None,
    help="Compare Lean 4 / Mathlib search engines: crawl politely, cache everything, score with one scorer.",
)


def _version(value: bool) -> None:
    if value:
        from engines import code_version

        typer.echo(f"engines {code_version()}")
        raise typer.Exit(0)


@app.callback()
def _root(
    ctx: typer.Context,
    db: str | None = typer.Option(
        None, "--db", envvar="ENGINES_DATABASE_URL", show_envvar=True,
        help="Database URL (default sqlite:///cache.db in the working directory).",
    ),
    version: bool = typer.Option(False, "--version", is_eager=True, callback=_version,
                                 help="Print the version (and the git commit of a checkout) and exit."),
) -> None:
    ctx.ensure_object(dict)
    ctx.obj["db_url"] = db


for _name in COMMAND_MODULES:
    importlib.import_module(_name).register(app)


def _set_db(ctx: typer.Context, value: Optional[str]) -> Optional[str]:
    if value:  # the command's --db wins over `engines --db` and ENGINES_DATABASE_URL
        root = ctx.find_root()
        root.ensure_object(dict)
        root.obj["db_url"] = value
    return value


# What a Ctrl-C leaves behind, per command (`engines crawl` says it itself); printed as
# "interrupted: ..." on stderr, exit 130.
INTERRUPTED = {
    "demo": "what was loaded, crawled and answered is kept; run the same command again to resume "
            "(answered texts are not sent again)",
    "run": "answers and encoded chunks already written are kept; run the same command again to resume",
    "import": "nothing was imported; run the same command again",
    "run import": "nothing of this run was imported; run the same command again",
    "run drop": "nothing was removed; run the same command again",
    "export": "no bundle was written; run the same command again",
    "reparse": "finished batches are kept; run the same command again to resume",
    "corpus load": "nothing of this corpus was written; run the same command again",
    "bench load": "files loaded before the interrupt are kept; run the same command again to load the rest",
    "score": "run the same command again",
}


def _interrupted(name: str) -> str:
    for key in (name, name.split(" ")[0]):
        if key in INTERRUPTED:
            return f"interrupted: {INTERRUPTED[key]}"
    return "interrupted: run the same command again"


def _wrap_command(fn, name: str):  # noqa: ANN001, ANN202
    """``fn`` with a ``--db URL`` option of its own (a command that declares ``db`` keeps its
    own) and one line on stderr on Ctrl-C (exit 130)."""
    sig = inspect.signature(fn, eval_str=True)
    own_db = "db" in sig.parameters

    @functools.wraps(fn)
    def wrapper(*args, **kw):  # noqa: ANN002, ANN003, ANN202
        kw.pop("db_of_command", None)
        try:
            return fn(*args, **kw)
        except KeyboardInterrupt:
            typer.echo(_interrupted(name), err=True)
            raise typer.Exit(130) from None

    if own_db:
        return wrapper
    opt = inspect.Parameter(
        "db_of_command", inspect.Parameter.KEYWORD_ONLY, annotation=Optional[str],
        default=typer.Option(None, "--db", metavar="URL", callback=_set_db,
                             help="Database URL (overrides engines --db and ENGINES_DATABASE_URL)."))
    params = [p.replace(kind=inspect.Parameter.KEYWORD_ONLY) if p.kind is inspect.Parameter.POSITIONAL_OR_KEYWORD
              else p for p in sig.parameters.values()]
    wrapper.__signature__ = sig.replace(parameters=[*params, opt])
    wrapper.__annotations__ = {**{p.name: p.annotation for p in params}, "db_of_command": Optional[str]}
    return wrapper


def _add_db_options(typer_app: typer.Typer, prefix: str = "") -> None:
    """Every command, in one place: ``--db`` (the command's, then ``engines --db``, then
    ENGINES_DATABASE_URL, then the default: cli.commands.common.db_url) and the Ctrl-C line."""
    for info in typer_app.registered_commands:
        name = info.name or info.callback.__name__.replace("_", "-")
        info.callback = _wrap_command(info.callback, f"{prefix}{name}")
    for group in typer_app.registered_groups:
        _add_db_options(group.typer_instance, f"{prefix}{group.name} ")


_add_db_options(app)


def run(argv: list[str] | None = None) -> int:
    """Run the CLI; return the exit code. Every failure is one line on stderr.

    Click's usage errors (a malformed ``--limit``, an unknown option) are printed as one
    ``error:`` line instead of the boxed usage text, so cron mails and logs stay greppable.
    """
    try:
        rv = app(args=argv, prog_name="engines", standalone_mode=False)
    except typer.Exit as exc:
        return exc.exit_code
    except typer.Abort:
        typer.echo("error: interrupted", err=True)
        return 130
    except _cx.NoArgsIsHelpError as exc:
        typer.echo(exc.ctx.get_help() if exc.ctx is not None else exc.format_message())
        return 0
    except _cx.UsageError as exc:
        where = exc.ctx.command_path if exc.ctx is not None else "engines"
        typer.echo(f"error: {_one_line(exc.format_message()).rstrip('.')}; see `{where} --help`", err=True)
        return exc.exit_code
    except _cx.ClickException as exc:
        typer.echo(f"error: {_one_line(exc.format_message())}", err=True)
        return exc.exit_code
    except UserError as exc:
        typer.echo(f"error: {_one_line(exc.message)}", err=True)
        return exc.exit_code
    except KeyboardInterrupt:
        typer.echo("error: interrupted", err=True)
        return 130
    except Exception as exc:  # noqa: BLE001
        if os.environ.get(DEBUG_ENV):
            raise
        typer.echo(unexpected_line(exc), err=True)
        return 1
    return rv if isinstance(rv, int) else 0


def main() -> None:
    watch_interrupts()  # a Ctrl-C raised inside a finalizer is delivered again, not lost
    sys.exit(run())


if __name__ == "__main__":  # pragma: no cover
    sys.exit(main())
