-- Agents at the bench: the tokens an MCP client presents, each made by a student (or the teacher) on the page and
-- acting as them; which submissions an agent made; and the teacher's switch of agents per exercise.

-- A token is "pgt_<selector>_<verifier>": the selector finds its row, the verifier is checked against its SHA-256
-- (kept here, never the token: a token is 256 random bits, which no one guesses offline, so one fast hash keeps it
-- as safe as scrypt keeps a password a person chose). A revoked token keeps its row (its submissions name it).
CREATE TABLE agent_tokens (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    student     TEXT NOT NULL CHECK (length(student) BETWEEN 1 AND 64),
    name        TEXT NOT NULL CHECK (length(name) BETWEEN 1 AND 40 AND name = trim(name)),
    selector    TEXT NOT NULL UNIQUE CHECK (length(selector) = 12 AND selector NOT GLOB '*[^0-9a-f]*'),
    digest      TEXT NOT NULL CHECK (length(digest) = 64 AND digest NOT GLOB '*[^0-9a-f]*'),
    created_at  REAL NOT NULL,
    last_used   REAL,
    revoked_at  REAL
);
CREATE INDEX agent_tokens_by_student ON agent_tokens (student, revoked_at);

-- A submission an agent made: the token it came with, and that token's name as it was then (NULL both: a person's).
ALTER TABLE submissions ADD COLUMN agent_token INTEGER REFERENCES agent_tokens (id);
ALTER TABLE submissions ADD COLUMN agent TEXT CHECK ((agent IS NULL OR length(agent) BETWEEN 1 AND 40)
                                                   AND (agent IS NULL) = (agent_token IS NULL));

-- The teacher's switch: agents allowed (1) or forbidden (0) on one exercise, over its exercise.toml's `agents`.
CREATE TABLE exercise_agents (
    exercise    TEXT PRIMARY KEY CHECK (length(exercise) BETWEEN 1 AND 64),
    allowed     INTEGER NOT NULL CHECK (allowed IN (0, 1)),
    created_at  REAL NOT NULL
);
