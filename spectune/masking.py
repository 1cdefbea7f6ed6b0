"""Passwords out of everything spectune prints or writes: storage URLs in every form.

A database URL carries a secret in its userinfo (``postgresql://user:secret@host/db``; the secret may itself hold
``@``, ``:``, ``/``, ``?`` or ``%``-escapes when the user did not escape it) or in its query string
(``?password=secret``, ``&sslpassword=...``, ``token``, ...). ``mask_url`` replaces each secret by ``***``
without trusting a URL parser: the userinfo is everything up to the *last* ``@`` after ``://`` (so an
unescaped ``@`` in a password is masked too; a query value holding ``@`` masks more than needed, never less).
``mask_text`` does the same for every URL inside free text (error messages), and ``secrets`` lists the raw and
decoded secrets of a URL so that a driver's message quoting one can be cleaned.
"""
from __future__ import annotations

import re
from typing import Sequence
from urllib.parse import quote, unquote

MASK = "***"
SECRET_KEYS = ("password", "passwd", "pwd", "pass", "sslpassword", "secret", "token", "access_token", "api_key",
               "apikey", "auth")
_KEY = "|".join(sorted(SECRET_KEYS, key=len, reverse=True))
_PAIR = re.compile(rf"(?i)(^|[?&;\s,]|%26)({_KEY})(\s*=\s*|%3D)([^&#\s]*)")
_SCHEME = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://")
_URL = re.compile(r"[A-Za-z][A-Za-z0-9+.\-]*://\S+")


def _split(url: str) -> tuple[str, str | None, str | None, str]:
    """(scheme://, user, password, rest after the userinfo); user/password None where there is none."""
    m = _SCHEME.match(url)
    if not m:
        return "", None, None, url
    head, rest = m.group(0), url[m.end():]
    at = rest.rfind("@")
    if at == -1:
        return head, None, None, rest
    user, sep, pw = rest[:at].partition(":")
    return head, user, (pw if sep else None), rest[at + 1:]


def mask_url(url: str | None) -> str:
    """``url`` with the password of its userinfo and every secret query value replaced by ``***``."""
    if not url:
        return ""
    head, user, pw, rest = _split(str(url))
    body = rest if user is None else f"{user}{'' if pw is None else ':' + MASK}@{rest}"
    return head + _PAIR.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + MASK, body)


def userinfo_password(url: str | None) -> str | None:
    """The %-decoded password of ``url``'s userinfo (``http://:TOKEN@host``), None where it has none."""
    pw = _split(str(url or ""))[2]
    return unquote(pw) if pw else None


def without_userinfo(url: str) -> str:
    """``url`` without its ``user:password@`` (the last ``@`` after ``://``, as ``mask_url`` reads it)."""
    head, _, _, rest = _split(url)
    return head + rest


def secrets(url: str | None) -> list[str]:
    """The secrets ``mask_url`` hides in ``url``: raw, %-decoded and %-encoded, longest first."""
    if not url:
        return []
    head, _, pw, _ = _split(str(url))
    found = [pw] if pw else []
    found += [m.group(4) for m in _PAIR.finditer(str(url)[len(head):]) if m.group(4)]
    found += [unquote(s) for s in found] + [quote(s, safe="") for s in found]
    return sorted({s for s in found if s}, key=len, reverse=True)


def _secret_flag(arg: str) -> bool:
    """Whether a command-line flag names a secret (``--api-key``, ``--hf-token``, ``--ssl-keyfile-password``)."""
    name = arg.lstrip("-").split("=", 1)[0].replace("-", "_").lower()
    return arg.startswith("-") and any(name == k or name.endswith("_" + k) for k in SECRET_KEYS)


def arg_secrets(args: Sequence[str]) -> list[str]:
    """The values of secret flags in ``args`` (``--api-key KEY``, ``--api-key=KEY``) and of the URLs in them."""
    out = []
    for i, a in enumerate(args):
        if _secret_flag(a):
            out.append(a.split("=", 1)[1] if "=" in a else (args[i + 1] if i + 1 < len(args) else ""))
        out += secrets(a) if _SCHEME.search(a) else []
    return sorted({s for s in out if s}, key=len, reverse=True)


def mask_args(args: Sequence[str]) -> list[str]:
    """``args`` as they may be printed or stored: secret flags' values and URLs' secrets replaced by ``***``."""
    out, hide = [], False
    for a in args:
        if hide:
            out.append(MASK)
        elif _secret_flag(a) and "=" in a:
            out.append(a.split("=", 1)[0] + "=" + MASK)
        else:
            out.append(mask_text(a))
        hide = _secret_flag(a) and "=" not in a and not hide
    return out


def mask_text(text: str, urls: tuple[str | None, ...] = (), also: Sequence[str] = ()) -> str:
    """``text`` with every URL masked, secret ``key=value`` pairs masked, and the secrets of ``urls`` and the
    strings ``also`` (``arg_secrets``) removed."""
    out = _URL.sub(lambda m: mask_url(m.group(0)), str(text))
    out = _PAIR.sub(lambda m: m.group(1) + m.group(2) + m.group(3) + MASK, out)
    for group in [*(secrets(url) for url in urls), sorted(also, key=len, reverse=True)]:
        for s in filter(None, group):  # a short secret only where it stands alone (never inside other words)
            out = out.replace(s, MASK) if len(s) >= 4 else re.sub(
                rf"(?<![A-Za-z0-9]){re.escape(s)}(?![A-Za-z0-9])", MASK, out)
    return out
