"""The ``spectune`` command: one thin click group over the library API.

Every command is a few lines that parse options and call the API; a ``SpectuneError`` becomes one line on
stderr and exit status 2, never a traceback.
"""
from __future__ import annotations

import functools
import sys

import click

from spectune.errors import SpectuneError


def _one_line_errors(fn):
    @functools.wraps(fn)
    def wrapper(*args, **kwargs):
        try:
            return fn(*args, **kwargs)
        except SpectuneError as e:
            click.echo(f"error: {e}", err=True)
            sys.exit(2)
        except KeyboardInterrupt:
            click.echo("interrupted", err=True)
            sys.exit(130)

    return wrapper


class _Group(click.Group):
    def command(self, *args, **kwargs):  # every subcommand gets one-line errors
        deco = super().command(*args, **kwargs)
        return lambda fn: deco(_one_line_errors(fn))


@click.group(cls=_Group, context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(package_name="spectune")
def cli():
    """spectune: calibrate, tune and run speculative / collaborative LLM decoding."""


@cli.command("models")
def models_cmd():
    """List the bundled model family (name, parameters, source, license, cache directory, ready).

    Example: spectune models
    """
    from spectune.models import bundled

    rows = [(m.name, f"{m.parameters / 1e6:.1f}M", m.source, m.license, str(m.cache_dir), "yes" if m.ready else "no")
            for m in bundled.info()]
    head = ("name", "params", "source", "license", "cache", "ready")
    widths = [max(len(r[i]) for r in rows + [head]) for i in range(len(head))]
    for r in [head] + rows:
        click.echo("  ".join(c.ljust(w) for c, w in zip(r, widths)).rstrip())


def main():
    cli(prog_name="spectune")
