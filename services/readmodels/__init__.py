"""Read models in SQL: table definitions, the projector's writes, the API's queries."""
