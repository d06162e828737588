#!/bin/sh
# Patroni runs this once, on the node that bootstraps the cluster, as postgres, with the superuser's
# connection string as $1 (Patroni 3 creates no databases or application roles itself).
# Install as /etc/patroni/post_bootstrap.sh, owned by postgres, mode 700.
#   gpuscope     the collectors' role: owns the database, applies the migrations
#   gpuscope_ro  the dashboards' role: reads everything, writes nothing
# Neither gets a password here, so none is written into this file or a log: set them on the primary,
# typed at the prompt, with `sudo -u postgres psql -c '\password gpuscope'` (and gpuscope_ro).
set -eu
exec psql -X -q -v ON_ERROR_STOP=1 "$1" <<'SQL'
CREATE ROLE gpuscope LOGIN;
CREATE ROLE gpuscope_ro LOGIN IN ROLE pg_read_all_data;
CREATE DATABASE gpuscope OWNER gpuscope;
-- TimescaleDB (shared_preload_libraries in patroni.yml): created here, by the superuser, because the
-- collector's role may not create it.
-- \connect gpuscope
-- CREATE EXTENSION IF NOT EXISTS timescaledb;
SQL
