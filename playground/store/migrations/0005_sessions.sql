-- Login sessions of the roster's students kept across a restart of the server: a class mid-lab is not logged out by
-- one. Gradio keeps a session's token in memory only; a row here lets the server take it back after a restart. Kept:
-- the token's SHA-256 (never the token: the row cannot be replayed from a copy of the database), whose it is, and
-- the roster's stored hash its login stood on (a password given anew since, or a student removed, ends it). The
-- teacher's sessions and those of the class password are not kept: a digest of either password would be a guess
-- to check offline against a copy of the database, and both are typed again in seconds.
CREATE TABLE sessions (
    digest      TEXT PRIMARY KEY CHECK (length(digest) = 64 AND digest NOT GLOB '*[^0-9a-f]*'),
    user        TEXT NOT NULL CHECK (length(user) BETWEEN 1 AND 64),
    credential  TEXT NOT NULL,
    created_at  REAL NOT NULL
);
CREATE INDEX sessions_by_user ON sessions (user, created_at);
CREATE INDEX sessions_by_age ON sessions (created_at);
