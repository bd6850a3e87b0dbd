"""The REST API: commands in (202 Accepted), read models out."""
