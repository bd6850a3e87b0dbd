"""The README stays true: every setting is documented in its table."""

from pathlib import Path

import pytest

from runtime.settings import Settings

pytestmark = pytest.mark.unit

README = (Path(__file__).parents[2] / "README.md").read_text()


@pytest.mark.parametrize("field", sorted(Settings.model_fields))
def test_every_setting_is_in_the_readme_table(field: str) -> None:
    assert f"| `SAGALINE_{field.upper()}` |" in README


def test_every_setting_has_a_description() -> None:
    assert [n for n, f in Settings.model_fields.items() if not f.description] == []
