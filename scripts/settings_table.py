"""Print the README's settings table from the one Settings class; ``--write`` puts it in
README.md in place of the table there."""

import sys
from pathlib import Path

from runtime.settings import Settings

HEADER = "| Variable | Default | Meaning |"


def table() -> list[str]:
    rows = [HEADER, "|---|---|---|"]
    for name, field in Settings.model_fields.items():
        default = field.get_default(call_default_factory=True)
        shown = "" if default in ("", None) else str(default)
        rows.append(f"| `SAGALINE_{name.upper()}` | `{shown}` | {field.description} |")
    return rows


def write(readme: Path) -> None:
    lines = readme.read_text().splitlines()
    start = lines.index(HEADER)
    end = start
    while end < len(lines) and lines[end].startswith("|"):
        end += 1
    readme.write_text("\n".join([*lines[:start], *table(), *lines[end:]]) + "\n")


if __name__ == "__main__":
    if sys.argv[1:] == ["--write"]:
        write(Path(__file__).resolve().parent.parent / "README.md")
    else:
        print("\n".join(table()))
