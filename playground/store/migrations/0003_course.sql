-- A course for a term: students removed from the roster (kept, their login refused), when each was last seen, the
-- names students show on the boards, submissions' GPU record and speed-of-light share, flagged submissions,
-- announcements, deadline extensions, and every compile and run a student did on an exercise.

-- A removed student keeps their row (the roster stays in force and their submissions keep their name) but no longer
-- logs in and is left off the boards and the grades; importing the name again brings them back.
ALTER TABLE students ADD COLUMN removed_at REAL;

-- Last seen: the last login or activity of a name, on the roster or not (the class password takes any name).
CREATE TABLE seen (
    student     TEXT PRIMARY KEY CHECK (length(student) BETWEEN 1 AND 64),
    last_seen   REAL NOT NULL
);

-- The name a student shows on the boards instead of their own (the teacher still sees who it is).
CREATE TABLE aliases (
    student     TEXT PRIMARY KEY CHECK (length(student) BETWEEN 1 AND 64),
    alias       TEXT NOT NULL UNIQUE COLLATE NOCASE CHECK (length(alias) BETWEEN 2 AND 24 AND alias = trim(alias)),
    created_at  REAL NOT NULL
);

-- What a graded submission ran on: the GPU's model, its speed as a percentage of the timed problem's speed of light
-- on that GPU (bytes at the measured copy bandwidth or FLOPs at the measured matmul peak, whichever takes longer),
-- the measurement record (clocks, temperature, throttle reasons, driver, TileLang), and whether it came in the
-- late window (its score takes the exercise's late penalty).
ALTER TABLE submissions ADD COLUMN gpu TEXT CHECK (gpu IS NULL OR length(gpu) <= 128);
ALTER TABLE submissions ADD COLUMN sol_percent REAL CHECK (sol_percent IS NULL OR sol_percent > 0);
ALTER TABLE submissions ADD COLUMN record TEXT NOT NULL DEFAULT '{}' CHECK (json_valid(record));
ALTER TABLE submissions ADD COLUMN late INTEGER NOT NULL DEFAULT 0 CHECK (late IN (0, 1));

-- A flagged submission is off the board and out of the grades, kept, with the teacher's reason.
CREATE TABLE flags (
    submission  INTEGER PRIMARY KEY REFERENCES submissions (id),
    reason      TEXT NOT NULL CHECK (length(reason) BETWEEN 1 AND 500),
    created_at  REAL NOT NULL
);

-- The announcement on every student's page is the newest row; an empty text takes it down.
CREATE TABLE announcements (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    text        TEXT NOT NULL CHECK (length(text) <= 2000),
    created_at  REAL NOT NULL
);

-- A deadline moved for one student of one exercise (a time in seconds since the epoch).
CREATE TABLE extensions (
    exercise    TEXT NOT NULL CHECK (length(exercise) BETWEEN 1 AND 64),
    student     TEXT NOT NULL CHECK (length(student) BETWEEN 1 AND 64),
    deadline    REAL NOT NULL,
    created_at  REAL NOT NULL,
    PRIMARY KEY (exercise, student)
);

-- Every compile and run of a student on an exercise (submissions are in their own table): when, whether it worked,
-- the stage an error came from, and its speed where it was timed.
CREATE TABLE activity (
    id          INTEGER PRIMARY KEY AUTOINCREMENT,
    exercise    TEXT NOT NULL CHECK (length(exercise) BETWEEN 1 AND 64),
    student     TEXT NOT NULL CHECK (length(student) BETWEEN 1 AND 64),
    action      TEXT NOT NULL CHECK (action IN ('compile', 'run')),
    ok          INTEGER NOT NULL CHECK (ok IN (0, 1)),
    stage       TEXT CHECK (stage IS NULL OR length(stage) <= 32),
    message     TEXT NOT NULL DEFAULT '' CHECK (length(message) <= 300),
    median_ms   REAL CHECK (median_ms IS NULL OR median_ms > 0),
    sol_percent REAL CHECK (sol_percent IS NULL OR sol_percent > 0),
    created_at  REAL NOT NULL
);
CREATE INDEX activity_by_exercise ON activity (exercise, student, created_at);
