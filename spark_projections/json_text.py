"""JSON text as the projector's codec writes a ``JsonList`` column, from Spark's ``to_json``.

The codec (:mod:`readside.codec`) writes ``json.dumps(items, separators=(",", ":"))``:
compact, and with ``ensure_ascii``, so every character outside printable ASCII (a control
character, DEL, any non-ASCII letter) is a ``\\uXXXX`` escape in lower-case hex, a character
beyond the BMP as its two UTF-16 surrogates; the short escapes (``\\n``, ``\\"``...) are the
same as Spark's. Spark's ``to_json`` (Jackson) writes the same compact text except that it
leaves non-ASCII characters and DEL as they are and spells a control character's escape in
upper-case hex. A text with neither (nearly every one: ids are plain ASCII) is kept as it
is; the others are rewritten token by token, natively.
"""

from __future__ import annotations

from pyspark.sql import Column
from pyspark.sql import functions as F

# One JSON text token: a \u escape, another escape, or one character (a code point: Java
# regexes never split a surrogate pair).
_TOKEN = r"(?s)\\u[0-9A-Fa-f]{4}|\\.|."
_PRINTABLE_ASCII = "^[ -~]$"


def python_json(text: Column) -> Column:
    """``text`` (compact JSON from ``to_json``) as Python's ``json.dumps`` writes it."""
    rewrite = F.array_join(F.transform(F.regexp_extract_all(text, F.lit(_TOKEN), 0), _token), "")
    return F.when(text.rlike(r"[^ -~]|\\u"), rewrite).otherwise(text)


def _token(token: Column) -> Column:
    escaped = F.regexp_replace(F.lower(F.hex(F.encode(token, "UTF-16BE"))), "(.{4})", r"\\u$1")
    return (
        F.when(token.startswith("\\u"), F.lower(token))
        .when(token.startswith("\\") | token.rlike(_PRINTABLE_ASCII), token)
        .otherwise(escaped)
    )
