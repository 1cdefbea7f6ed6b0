"""The Markdown reference of the ``spectune`` command line, rendered from click's own command objects.

Every command and subcommand (recursively, in click's sorted order) gets its usage line, its full help text,
a table of its arguments and a table of its options (help, default, type). Nothing parses ``--help`` output.

    python -m spectune.cli_docs            # print the reference
    python -m spectune.cli_docs --write    # replace docs/cli.md (temp file + os.replace)

``tests/test_cli_docs.py`` fails when ``docs/cli.md`` differs from what this renders.
"""
from __future__ import annotations

import inspect
import sys
from pathlib import Path
from typing import Iterator

import click

DOC_PATH = Path(__file__).resolve().parent.parent / "docs" / "cli.md"
REGENERATE = "python -m spectune.cli_docs --write"
_UNSET = getattr(click.core, "UNSET", None)  # click >= 8.3 marks "no default" with a sentinel


def _cell(text: object) -> str:
    """One Markdown table cell: a single line, pipes and angle brackets escaped."""
    return " ".join(str(text).split()).replace("|", "\\|").replace("<", "&lt;")


def walk(cmd: click.Command, ctx: click.Context) -> Iterator[tuple[click.Command, click.Context]]:
    """``cmd`` and every visible subcommand below it, depth first, in the order click lists them."""
    yield cmd, ctx
    if isinstance(cmd, click.Group):
        for name in cmd.list_commands(ctx):
            sub = cmd.get_command(ctx, name)
            if sub is not None and not sub.hidden:
                yield from walk(sub, _context(sub, name, ctx))


def _context(cmd: click.Command, name: str, parent: click.Context | None = None) -> click.Context:
    """What ``cmd.make_context`` builds, without parsing arguments (context_settings: e.g. ``-h``)."""
    return click.Context(cmd, info_name=name, parent=parent, **cmd.context_settings)


def _default(p: click.Parameter, ctx: click.Context) -> str:
    d = p.get_default(ctx, call=False)
    if callable(d):
        return "(computed)"
    if d is None or d is _UNSET or d == () or (getattr(p, "is_flag", False) and d is False):
        return ""
    return f"`{d}`"


def _type(p: click.Parameter) -> str:
    if getattr(p, "is_flag", False):
        return "flag"
    return p.type.name + (", repeatable" if p.multiple else "")


def _params(cmd: click.Command, ctx: click.Context) -> list[click.Parameter]:
    """``cmd``'s parameters and its help option as ``ctx`` names it (click caches the help option object
    on the command the first time any context asks, so a context built without the group's settings earlier in
    the process would otherwise leave a ``--help``-only option behind)."""
    names = cmd.get_help_option_names(ctx) if cmd.add_help_option else []
    cached = cmd.get_help_option(ctx)
    help_help = cached.help if cached is not None else None
    return [*cmd.params, *([click.Option(names, is_flag=True, expose_value=False, help=help_help)] if names else [])]


def render_command(cmd: click.Command, ctx: click.Context) -> list[str]:
    usage = " ".join([ctx.command_path, *cmd.collect_usage_pieces(ctx)])
    help_text = inspect.cleandoc((cmd.help or "").split("\f")[0])  # click hides what follows \f from --help
    lines = [f"## `{ctx.command_path}`", "", "```text", usage, "```", ""]
    lines += [line.replace("<", "&lt;") for line in help_text.splitlines() if line.strip() != "\b"] + [""]
    params = [p for p in _params(cmd, ctx) if not getattr(p, "hidden", False)]
    args = [p for p in params if isinstance(p, click.Argument)]
    if args:
        lines += ["| argument | type | required |", "|---|---|---|"]
        lines += [f"| `{p.human_readable_name}` | {_type(p)} | {'yes' if p.required else 'no'} |" for p in args]
        lines.append("")
    opts = [(p, p.get_help_record(ctx)) for p in params if isinstance(p, click.Option)]
    if opts:
        lines += ["| option | help | default | type |", "|---|---|---|---|"]
        for p, rec in opts:
            if rec is not None:
                name = f"`{_cell(rec[0])}`" + (" (required)" if p.required else "")
                lines.append(f"| {name} | {_cell(p.help or '')} | {_cell(_default(p, ctx))} | {_cell(_type(p))} |")
        lines.append("")
    return lines


def render(group: click.Command | None = None, prog_name: str = "spectune") -> str:
    """The whole reference as Markdown (``group`` defaults to ``spectune.cli.cli``)."""
    if group is None:
        from spectune.cli import cli as group
    root = _context(group, prog_name)
    pairs = list(walk(group, root))
    lines = ["# Command-line reference", "",
             f"Generated from the click commands by `{REGENERATE}`; do not edit by hand.", "",
             "Commands: " + ", ".join(f"`{c.command_path}`" for _, c in pairs), ""]
    for cmd, ctx in pairs:
        lines += render_command(cmd, ctx)
    return "\n".join(lines).rstrip() + "\n"


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    if args not in ([], ["--write"]):
        sys.exit(f"usage: python -m spectune.cli_docs [--write]   (got {' '.join(args)})")
    if not args:
        sys.stdout.write(render())
        return
    from spectune.config import write_text_atomic  # temp file beside the target, then os.replace

    write_text_atomic(DOC_PATH, render())
    print(f"wrote {DOC_PATH}", file=sys.stderr)


if __name__ == "__main__":
    main()
