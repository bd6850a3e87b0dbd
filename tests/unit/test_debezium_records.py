"""The AsyncAPI document's models of Debezium's records match the records Debezium wrote.

Every record captured from the real pipeline (tests/fixtures/debezium/, both converter
shapes) validates against the model ``runtime.topics.external_topics`` gives its topic, so
the document a team reads describes what is really on those topics.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from runtime.settings import Settings
from runtime.topics import external_topics

pytestmark = pytest.mark.unit

FIXTURES = Path(__file__).parent.parent / "fixtures" / "debezium"


def _bodies() -> dict[str, type]:
    """Topic suffix (``school.student``, ``transaction``) -> the documented value model."""
    out: dict[str, type] = {}
    for spec in external_topics(Settings.model_construct()):
        assert spec.records is not None and spec.records.body is not None, spec.name
        out[spec.name.split(".", 1)[1]] = spec.records.body
    return out


@pytest.mark.parametrize("shape", ["schemas-true", "schemas-false"])
def test_every_captured_record_fits_its_topics_documented_model(shape: str) -> None:
    bodies = _bodies()
    checked = 0
    for line in (FIXTURES / f"{shape}.jsonl").read_text().splitlines():
        record = json.loads(line)
        if record["value"] is None:
            continue  # a tombstone: the document says one follows each delete
        value = json.loads(record["value"])
        if shape == "schemas-true":
            assert set(value) == {"schema", "payload"}
            value = value["payload"]
        bodies[record["topic"].split(".", 1)[1]].model_validate(value)
        checked += 1
    assert checked >= 20


def test_a_record_of_another_table_does_not_fit() -> None:
    bodies = _bodies()
    line = (FIXTURES / "schemas-false.jsonl").read_text().splitlines()[0]
    value = json.loads(json.loads(line)["value"])  # a school.student snapshot row
    with pytest.raises(ValueError):
        bodies["school.student_course"].model_validate(value)
