"""Participants: processes keyed by the entity they guard, answering saga commands."""
