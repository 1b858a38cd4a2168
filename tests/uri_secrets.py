"""URI passwords holding the characters that end a URI's authority early, and a leak check.

Real AWS secret keys hold ``/`` and ``+``; ``# ? @ :`` happen in other passwords and tokens.
A parser not told where the user-info ends stops at the first of them and leaves the rest.
"""

from __future__ import annotations

from urllib.parse import quote

#: The characters, by the name a test id shows.
SPECIAL = {"slash": "/", "plus": "+", "hash": "#", "question": "?", "at": "@", "colon": ":"}
#: A password is these pieces joined by one special character: no piece may show either.
PIECES = ("wJalrXUtnFEMI", "K7MDENGbPxRfi", "CYEXAMPLEKEY")


def with_password(uri: str, password: str, user: str) -> str:
    """``uri`` (or a local path) with ``user:password`` as its user-info, written as is."""
    if "://" not in uri:
        return f"file://{user}:{password}@localhost{uri}"
    scheme, _, rest = uri.partition("://")
    return f"{scheme}://{user}:{password}@{rest}"


def assert_absent(secrets: list[str], text: str, where: str) -> None:
    """No secret shows in ``text``, as written or percent-encoded; the error quotes the line."""
    for secret in secrets:
        for form in {secret, quote(secret, safe=""), quote(secret)}:
            idx = text.find(form)
            if idx >= 0:
                line = text[text.rfind("\n", 0, idx) + 1 : text.find("\n", idx) % (len(text) + 1)]
                raise AssertionError(f"a secret appears in {where}: {line[:400]}")
