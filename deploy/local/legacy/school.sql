-- The legacy school database: the system of record whose changes Sagaline captures
-- with Debezium (issue 10). Applied by deploy/local/connect.sh start as the
-- PostgreSQL superuser (over the cluster's private unix socket), and safe to apply
-- again (every statement is idempotent):
--   deploy/local/postgres.sh admin -v ON_ERROR_STOP=1 < deploy/local/legacy/school.sql
-- Needs wal_level = logical on the cluster (deploy/local/postgres.sh sets it).

-- Roles: `sagaline` (created by postgres.sh) owns and writes the tables like the
-- legacy application would; `debezium` only reads them and the WAL. No password here:
-- deploy/local/postgres.sh creates both roles with the passwords it generates, and
-- under Docker deploy/postgres-init/20-debezium-password.sh sets debezium's from
-- deploy/.env. A role made here (none of those ran) cannot log in over TCP.
SELECT 'CREATE ROLE debezium LOGIN REPLICATION'
 WHERE NOT EXISTS (SELECT 1 FROM pg_roles WHERE rolname = 'debezium')\gexec
SELECT 'CREATE DATABASE legacy OWNER sagaline'
 WHERE NOT EXISTS (SELECT 1 FROM pg_database WHERE datname = 'legacy')\gexec

\connect legacy

CREATE SCHEMA IF NOT EXISTS school AUTHORIZATION sagaline;

CREATE TABLE IF NOT EXISTS school.student (
    id          text PRIMARY KEY,
    name        text,
    email       text,
    max_credits int
);

CREATE TABLE IF NOT EXISTS school.course (
    id       text PRIMARY KEY,
    title    text,
    teacher  text,
    capacity int,
    credits  int
);

CREATE TABLE IF NOT EXISTS school.student_course (
    student_id text REFERENCES school.student,
    course_id  text REFERENCES school.course,
    PRIMARY KEY (student_id, course_id)
);

ALTER TABLE school.student OWNER TO sagaline;
ALTER TABLE school.course OWNER TO sagaline;
ALTER TABLE school.student_course OWNER TO sagaline;

-- FULL: updates and deletes carry the whole old row in Debezium's `before`, so the
-- correlator can name the changed fields and a moved link's old course (the default
-- identity would give only the primary key, or nothing for an update).
ALTER TABLE school.student REPLICA IDENTITY FULL;
ALTER TABLE school.course REPLICA IDENTITY FULL;
ALTER TABLE school.student_course REPLICA IDENTITY FULL;

GRANT USAGE ON SCHEMA school TO debezium;
GRANT SELECT ON ALL TABLES IN SCHEMA school TO debezium;

-- The publication the pgoutput plugin streams from, created here (by the superuser)
-- so the connector needs no ownership of the tables (publication.autocreate.mode=disabled).
SELECT 'CREATE PUBLICATION sagaline_legacy FOR TABLE school.student, school.course, school.student_course'
 WHERE NOT EXISTS (SELECT 1 FROM pg_publication WHERE pubname = 'sagaline_legacy')\gexec
