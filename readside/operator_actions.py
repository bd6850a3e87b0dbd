"""The operator's actions on sagas (issue 32): each cancel or bulk compensation, who asked
for it, when, with which filter and reason, and its progress saga by saga, so an action is
shown on every saga it touched and resumes where it stopped after a crash of any part.

Its own metadata, declared with the rest in :data:`sagaline.schema.DECLARED` (a rebuild
never replaces these tables: they are no projection of the event log).
"""

from __future__ import annotations

from sqlalchemy import Column, DateTime, Index, Integer, MetaData, String, Table, Text

metadata = MetaData()

operator_actions = Table(
    "operator_actions",
    metadata,
    Column("action_id", String(64), primary_key=True),
    Column("kind", String(20), nullable=False, comment="cancel (one saga) or compensate"),
    Column("requested_by", String(100), nullable=False, comment="An API key id, or cli:<user>"),
    Column("requested_at", DateTime(timezone=True), nullable=False),
    Column("filter", Text(), nullable=False, comment="The saga list's filter, as JSON"),
    Column("reason", Text(), nullable=False),
    Column("state", String(20), nullable=False, comment="planned, running or done"),
    Column("planned", Integer(), nullable=False, comment="The sagas its dry run listed"),
    Column("sent", Integer(), nullable=False, comment="Of which done with (sent or skipped)"),
    Column("confirmed_by", String(100)),
    Column("confirmed_at", DateTime(timezone=True)),
    Column("finished_at", DateTime(timezone=True)),
    comment="Operators' actions on sagas: the dry run, the confirmation and the progress",
)

operator_action_sagas = Table(
    "operator_action_sagas",
    metadata,
    Column("action_id", String(64), primary_key=True),
    Column("saga_id", String(64), primary_key=True),
    Column("saga_type", String(50), nullable=False),
    Column("status", String(20), nullable=False, comment="Its status at the dry run"),
    Column("plan", Text(), nullable=False, comment="The dry run's commands for it, as JSON"),
    Column("message_id", String(100), nullable=False, comment="Its cancel's, from both ids"),
    Column("sent_at", DateTime(timezone=True), comment="Null until it is done with"),
    Column("outcome", Text(), comment="sent, or why its cancel was not sent"),
    comment="The sagas an operator's action touches, each with its dry run and progress",
)
# The actions shown on a saga's page.
Index("ix_operator_action_sagas_saga", operator_action_sagas.c.saga_id)
