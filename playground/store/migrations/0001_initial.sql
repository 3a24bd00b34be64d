-- The first schema: share links, the class roster, submissions and board resets.
-- Every JSON column is checked with json_valid and every enumerated column with IN, so a row that would not make
-- sense to the code that reads it back is refused by the database itself, whoever writes it.

CREATE TABLE shares (
    id          TEXT PRIMARY KEY CHECK (length(id) BETWEEN 8 AND 32 AND id NOT GLOB '*[^A-Za-z0-9]*'),
    kernel      TEXT NOT NULL CHECK (length(kernel) BETWEEN 1 AND 64),
    source      TEXT NOT NULL CHECK (length(source) <= 262144),
    params      TEXT NOT NULL CHECK (json_valid(params) AND json_type(params) = 'object' AND length(params) <= 16384),
    summary     TEXT CHECK (summary IS NULL OR (json_valid(summary) AND length(summary) <= 16384)),
    created_at  REAL NOT NULL
);

CREATE TABLE students (
    name           TEXT PRIMARY KEY CHECK (length(name) BETWEEN 1 AND 64 AND name = trim(name)),
    password_hash  TEXT NOT NULL CHECK (password_hash LIKE 'scrypt$%'),
    created_at     REAL NOT NULL
);

CREATE TABLE submissions (
    id           INTEGER PRIMARY KEY AUTOINCREMENT,
    exercise     TEXT NOT NULL CHECK (length(exercise) BETWEEN 1 AND 64),
    student      TEXT NOT NULL CHECK (length(student) BETWEEN 1 AND 64),
    source       TEXT NOT NULL CHECK (length(source) <= 262144),
    params       TEXT NOT NULL CHECK (json_valid(params) AND json_type(params) = 'object'),
    status       TEXT NOT NULL CHECK (status IN ('accepted', 'refused')),
    median_ms    REAL,
    baseline_ms  REAL,
    message      TEXT NOT NULL DEFAULT '',
    detail       TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(detail)),
    created_at   REAL NOT NULL,
    -- an accepted submission was verified and timed: it has a positive time; a refused one has none
    CHECK ((status = 'accepted' AND median_ms IS NOT NULL AND median_ms > 0 AND (baseline_ms IS NULL OR baseline_ms > 0))
           OR (status = 'refused' AND median_ms IS NULL))
);
CREATE INDEX submissions_by_exercise ON submissions (exercise, status, student, median_ms);

-- A reset hides every submission made up to it from the board (the teacher still sees them all).
CREATE TABLE board_resets (
    exercise     TEXT NOT NULL,
    after_id     INTEGER NOT NULL CHECK (after_id >= 0),
    created_at   REAL NOT NULL
);
CREATE INDEX board_resets_by_exercise ON board_resets (exercise, after_id);
