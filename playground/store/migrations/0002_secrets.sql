-- Keys the server makes once and keeps across restarts: the key that signs a browser's device cookie after a
-- login (playground/ui/server.py), so a browser the teacher logged in from stays known after a restart.

CREATE TABLE secrets (
    name        TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64),
    value       BLOB NOT NULL CHECK (length(value) >= 32),
    created_at  REAL NOT NULL
);
