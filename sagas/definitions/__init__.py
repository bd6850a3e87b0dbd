"""Saga definitions: one module per business transaction."""
