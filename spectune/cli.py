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


def main():
    cli(prog_name="spectune")
