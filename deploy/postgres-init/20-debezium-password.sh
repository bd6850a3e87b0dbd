#!/usr/bin/env bash
# Docker only: deploy/docker-compose.yml mounts this into the postgres image's
# /docker-entrypoint-initdb.d, after 10-legacy-school.sql (deploy/local/legacy/school.sql)
# created the replication role `debezium` without a password. This gives it
# DEBEZIUM_PASSWORD (from deploy/.env), read by psql's \getenv: never on a command line.
# Runs once, when the data volume is new. (Without Docker, deploy/local/postgres.sh
# generates and sets the password itself.)
set -euo pipefail
: "${DEBEZIUM_PASSWORD:?set it in deploy/.env}"
psql -v ON_ERROR_STOP=1 -X -q --username "$POSTGRES_USER" --dbname postgres <<'SQL'
\getenv debezium_password DEBEZIUM_PASSWORD
ALTER ROLE debezium PASSWORD :'debezium_password';
SQL
