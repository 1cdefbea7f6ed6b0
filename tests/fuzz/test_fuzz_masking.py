"""Storage passwords, in every URL form, never appear in what spectune prints, raises or stores."""
from __future__ import annotations

import string
from urllib.parse import quote

import pytest
from click.testing import CliRunner
from hypothesis import given
from hypothesis import strategies as st

from fuzz_helpers import CHEAP, CLI, assert_one_line_error
from spectune.cli import cli
from spectune.masking import mask_text, mask_url, userinfo_password, without_userinfo

LOWER = st.text(string.ascii_lowercase, min_size=1, max_size=6)
# every password holds a 'Q', which no scheme, user, host or database name below can contain
PASSWORD = st.text(string.ascii_letters + string.digits + "@:/?#%!$&'()*+,;=[]~._-", min_size=0,
                   max_size=12).map(lambda s: "Q" + s)
SCHEMES = st.sampled_from(["postgresql", "postgresql+psycopg2", "mysql+pymysql", "redis", "sqlite"])


def _forms(scheme: str, user: str, pw: str, host: str) -> list[tuple[str, str]]:
    """(URL, the password it carries) in every form."""
    q = quote(pw, safe="")
    plain = pw.replace("&", "").replace("#", "")  # a raw query value ends at & or #
    return [(f"{scheme}://{user}:{pw}@{host}:5432/db", pw),  # unescaped: may hold @ : / ? # %
            (f"{scheme}://{user}:{q}@{host}/db", pw),  # %-escaped
            (f"{scheme}://{host}/db?user={user}&password={q}", pw),
            (f"{scheme}://{host}/db?sslmode=require&PASSWORD={plain}&x=1", plain),
            (f"{scheme}://{user}:{q}@{host}/db?sslpassword={q}", pw)]


def _leaks(text: str, pw: str) -> bool:
    return pw in text or quote(pw, safe="") in text


@CHEAP
@given(scheme=SCHEMES, user=LOWER, pw=PASSWORD, host=LOWER)
def test_mask_url_hides_the_password_of_every_form(scheme, user, pw, host):
    for url, secret in _forms(scheme, user, pw, host):
        shown = mask_url(url)
        assert "Q" not in shown, (url, shown)
        assert host in shown  # still says where
        line = mask_text(f"cannot open storage {url}: auth failed for {secret} ({quote(secret, safe='')})", (url,))
        assert not _leaks(line, secret), (url, line)


def test_urls_without_a_password_are_unchanged():
    for url in ["sqlite:///study.db", "sqlite:////tmp/a@b/x.db", "postgresql://u@host/db", "postgresql://host/db"]:
        assert mask_url(url) == url


@pytest.mark.parametrize("form", range(5))
def test_recommend_never_prints_a_storage_password(valid_profile, tmp_path, form):
    url = _forms("postgresql", "u", "Qs3cr@t/pw%", "127.0.0.1")[form][0].replace(":5432", ":1")
    res = CliRunner().invoke(cli, ["recommend", "--models", "a,b", "--profile", str(valid_profile), "--trials", "3",
                                   "--no-calibrate", "--out", str(tmp_path / "r"), "--storage", url])
    assert_one_line_error(res, "storage")
    assert "Qs3cr" not in res.output and "s3cr" not in res.output


def test_study_names_are_masked(valid_profile, tmp_path):
    """A study name quoting a URL with a password is stored and printed masked."""
    import optuna

    out = tmp_path / "r"
    res = CliRunner().invoke(cli, ["recommend", "--models", "a,b", "--profile", str(valid_profile), "--trials", "3",
                                   "--no-calibrate", "--out", str(out), "--study-name",
                                   "run-postgresql://u:Qsecret@h/db"])
    assert res.exit_code == 0, res.output
    assert "Qsecret" not in res.output
    names = [s.study_name for s in optuna.get_all_study_summaries(f"sqlite:///{out / 'study.db'}")]
    assert names and not any("Qsecret" in n for n in names)
    assert not any("Qsecret" in f.read_text(errors="ignore") for f in out.glob("*.json"))


@CLI
@given(pw=PASSWORD)
def test_error_lines_of_the_cli_are_masked(pw):
    """Whatever error carries a URL, the CLI's one line hides its password."""
    from spectune import cli as cli_mod

    url = f"postgresql://u:{pw}@h/db"
    captured = []
    cli_mod.click.echo, real = (lambda m="", err=False, **k: captured.append(m)), cli_mod.click.echo
    try:
        cli_mod._say(f"error: cannot open {url}")
    finally:
        cli_mod.click.echo = real
    assert not _leaks(captured[0], pw)


@CHEAP
@given(pw=PASSWORD, host=LOWER, port=st.integers(1, 65535))
def test_an_engine_url_without_its_userinfo_keeps_host_port_and_path(pw, host, port):
    """What an engine request is sent to (``engines.http``): the token, whatever it holds, is neither in the URL
    nor taken for the host, and it is what goes into the bearer header."""
    url = f"http://:{pw}@{host}:{port}/v1/completions"
    assert without_userinfo(url) == f"http://{host}:{port}/v1/completions"
    assert userinfo_password(url) is not None and not _leaks(mask_url(url), pw)


@CHEAP
@given(pw=PASSWORD, flag=st.sampled_from(["--api-key", "--hf-token", "--ssl-keyfile-password"]),
       eq=st.booleans())
def test_engine_args_keep_no_secret(pw, flag, eq):
    """The user's --engine-args as stored in an engine profile, and a start-up log that echoes them."""
    from spectune.masking import arg_secrets, mask_args

    args = ["-t", "2", f"{flag}={pw}"] if eq else ["-t", "2", flag, pw]
    shown = " ".join(mask_args(args))
    assert not _leaks(shown, pw) and shown.startswith("-t 2 ") and flag in shown
    assert not _leaks(mask_text(f"non-default args: {args}", also=arg_secrets(args)), pw)
    assert mask_args(["-np", "8", "--max-num-batched-tokens", "64", "--tokenizer", "t"]) == [
        "-np", "8", "--max-num-batched-tokens", "64", "--tokenizer", "t"]
