-- One Postgres server, one database per service (docker-compose.yml).
-- The postgres image runs this once, when its data directory is empty; each
-- service then applies its own migrations (migrations/orders,
-- migrations/users) at start.
CREATE DATABASE orders;
CREATE DATABASE users;
