"""docs/cli.md is the reference rendered from the click commands (spectune/cli_docs.py) and stays in sync."""
from __future__ import annotations

import subprocess
import sys

import click

from spectune import cli_docs
from spectune.cli import cli


def _command_paths(cmd: click.Command, path: str) -> list[str]:
    """Every visible command path, collected from click's objects independently of cli_docs.walk."""
    out = [path]
    for name, sub in sorted(getattr(cmd, "commands", {}).items()):
        if not sub.hidden:
            out += _command_paths(sub, f"{path} {name}")
    return out


def test_docs_cli_md_is_up_to_date():
    have = cli_docs.DOC_PATH.read_text() if cli_docs.DOC_PATH.is_file() else "(missing)"
    assert have == cli_docs.render(), (
        f"docs/cli.md differs from the spectune CLI: regenerate it with `{cli_docs.REGENERATE}` and commit it")


def test_every_command_and_option_is_documented():
    text = cli_docs.render()
    paths = _command_paths(cli, "spectune")
    assert {"spectune generate", "spectune export", "spectune profile show"} <= set(paths)
    for path in paths:
        assert f"## `{path}`" in text, f"{path} missing from the CLI reference"
    for name in ("--engine-version", "--model-path NAME=PATH", "--storage", "--resume", "-h, --help"):
        assert f"`{name}" in text


def test_render_escapes_cells_and_skips_hidden():
    @click.group()
    def g():
        """Top.

        Second paragraph with <angle>.
        """

    @g.command("run")
    @click.argument("src", type=click.Path())
    @click.option("--mode", type=click.Choice(["a", "b"]), default="a", help="x | y")
    @click.option("--tag", multiple=True, help="Repeatable.")
    @click.option("--secret", hidden=True)
    def run(src, mode, tag, secret):
        """Run it."""

    @g.command("ghost", hidden=True)
    def ghost():
        """Hidden."""

    text = cli_docs.render(g, prog_name="tool")
    assert "## `tool run`" in text and "ghost" not in text and "--secret" not in text
    assert "tool run [OPTIONS] SRC" in text and "| `SRC` | path | yes |" in text
    assert "| `--mode [a\\|b]` | x \\| y | `a` | choice |" in text
    assert "| `--tag TEXT` | Repeatable. |  | text, repeatable |" in text
    assert "Second paragraph with &lt;angle>." in text  # dedented: not an indented code block


def test_write_is_atomic_and_matches_render(tmp_path, monkeypatch):
    target = tmp_path / "docs" / "cli.md"
    monkeypatch.setattr(cli_docs, "DOC_PATH", target)
    cli_docs.main(["--write"])
    assert target.read_text() == cli_docs.render()
    assert [p.name for p in target.parent.iterdir()] == ["cli.md"]  # no temp file left behind


def test_render_does_not_depend_on_contexts_built_before_it():
    """click caches a command's help option the first time any context asks for it; a context built without the
    group's settings (a test calling make_context on a subcommand) caches a ``--help``-only option, which CI's
    worker order once rendered into docs/cli.md's comparison. Poisoned in a separate process."""
    code = ("import click; from spectune.cli import cli; from spectune import cli_docs\n"
            "cli.get_command(click.Context(cli), 'calibrate').make_context('calibrate', [])\n"
            "print(cli_docs.render() == cli_docs.DOC_PATH.read_text())")
    out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120)
    assert out.stdout.strip() == "True", out.stderr[-2000:]
