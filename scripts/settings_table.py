"""Print the README's settings table from the one Settings class (paste it into README.md)."""

from services.settings import Settings

print("| Variable | Default | Meaning |")
print("|---|---|---|")
for name, field in Settings.model_fields.items():
    default = field.default
    shown = "" if default in ("", None) else str(default)
    print(f"| `SAGALINE_{name.upper()}` | `{shown}` | {field.description} |")
