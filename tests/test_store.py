"""The class's database (playground/store): it survives restarts, takes concurrent writers from threads and from
processes, refuses rows that make no sense, and migrates once."""
from __future__ import annotations

import json
import multiprocessing
import sqlite3
import threading

import pytest

from playground.store import Store, StoreError
from playground.store.db import Database, migrations


def test_a_new_database_is_in_wal_mode_at_the_latest_schema_version(tmp_path):
    store = Store(tmp_path / "data")
    assert (tmp_path / "data" / "playground.sqlite3").is_file()
    assert store.db.conn.execute("PRAGMA journal_mode").fetchone()[0] == "wal"
    assert store.db.version() == len(migrations()) >= 1


def test_data_survive_a_restart(tmp_path):
    store = Store(tmp_path)
    share = store.put_share("gemm", "print('edited')\n", {"block_M": 64})
    store.add_students({"Ada Lovelace": "secret"})
    store.add_submission("vector_add", "Ada Lovelace", "src", {}, accepted=True, median_ms=0.5, baseline_ms=1.0)
    store.close()
    del store

    again = Store(tmp_path)  # a new process would open it the same way
    assert again.get_share(share)["source"] == "print('edited')\n"
    assert again.check_student("Ada Lovelace", "secret")
    assert [row["student"] for row in again.leaderboard("vector_add")] == ["Ada Lovelace"]
    assert again.db.conn.execute("SELECT count(*) FROM schema_version").fetchone()[0] == len(migrations())


def test_a_backup_taken_while_the_server_writes_holds_every_committed_row_in_one_file(tmp_path, monkeypatch, capsys):
    # In WAL mode the newest writes sit in the -wal file until a checkpoint: a teacher who copied playground.sqlite3
    # alone got a database with no tables. The backup command copies what one read sees, into one file.
    from playground.cli import main
    store = Store(tmp_path / "data")
    store.db.conn.execute("PRAGMA wal_autocheckpoint = 0")  # (as a busy server: nothing checkpointed yet)
    store.add_students({"Ada Lovelace": "secret", "Grace Hopper": "other"})
    store.add_submission("vector_add", "Ada Lovelace", "src", {}, accepted=True, median_ms=0.5, baseline_ms=1.0)
    monkeypatch.setenv("PLAYGROUND_DATA", str(tmp_path / "data"))
    assert main(["backup", str(tmp_path / "saved" / "class.sqlite3")]) == 0
    assert "2 students on the roster, 1 submissions" in capsys.readouterr().out
    assert not (tmp_path / "saved" / "class.sqlite3-wal").exists()
    copy = sqlite3.connect(tmp_path / "saved" / "class.sqlite3")
    assert copy.execute("PRAGMA journal_mode").fetchone()[0] == "delete"
    assert copy.execute("SELECT count(*) FROM submissions").fetchone()[0] == 1
    copy.close()
    restored = tmp_path / "restored"
    restored.mkdir()
    (tmp_path / "saved" / "class.sqlite3").rename(restored / "playground.sqlite3")
    assert Store(restored).check_student("Ada Lovelace", "secret")
    assert (tmp_path / "saved" / "class.sqlite3").exists() is False  # (moved to restored/ above)
    assert oct((restored / "playground.sqlite3").stat().st_mode & 0o777) == "0o600", "hashes and keys: owner only"
    for ruinous in ("playground.sqlite3", "playground.sqlite3-wal", "anything"):  # the data folder's own files
        assert main(["backup", str(tmp_path / "data" / ruinous)]) == 1
        assert "outside the data folder" in capsys.readouterr().err
    (tmp_path / "kept.sqlite3").write_text("last week's")
    assert main(["backup", str(tmp_path / "kept.sqlite3")]) == 1 and "never overwrites" in capsys.readouterr().err
    assert (tmp_path / "kept.sqlite3").read_text() == "last week's"
    store.add_students({"Alan Turing": "x"})  # the live database, refused as a target, is whole and takes writes
    assert "Alan Turing" in store.password_hashes()
    monkeypatch.setenv("PLAYGROUND_DATA", str(tmp_path / "empty"))
    assert main(["backup", str(tmp_path / "x.sqlite3")]) == 1
    assert "no class database" in capsys.readouterr().err


def test_share_id_of_finds_only_the_same_content_and_stores_nothing(tmp_path):
    store = Store(tmp_path)
    share = store.put_share("gemm", "print('edited')\n", {"block_M": 64}, {"median_ms": 0.5})
    assert store.share_id_of("gemm", "print('edited')\n", {"block_M": 64}, {"median_ms": 0.5}) == share
    assert store.share_id_of("gemm", "print('edited')\n", {"block_M": 64}) is None  # another result line
    assert store.share_id_of("gemm", "print('other')\n", {"block_M": 64}) is None
    assert store.db.conn.execute("SELECT count(*) FROM shares").fetchone()[0] == 1


def test_migrations_run_once_and_a_newer_database_is_refused(tmp_path):
    Database(tmp_path).migrate()
    db = Database(tmp_path)
    assert db.migrate() == len(migrations())
    db.conn.execute("INSERT INTO schema_version (version, applied_at) VALUES (999, 0)")
    with pytest.raises(StoreError, match="newer than this code"):
        Database(tmp_path)


def _write_submissions(data_dir: str, who: str, count: int) -> None:
    store = Store(data_dir)
    for i in range(count):
        store.add_submission("softmax", who, f"source {i}", {"i": i}, accepted=True, median_ms=1.0 + i,
                             baseline_ms=2.0)
    store.close()


def test_concurrent_writers_from_threads_lose_nothing(tmp_path):
    store = Store(tmp_path)
    errors = []

    def write(who):
        try:
            for i in range(25):
                store.add_submission("softmax", who, f"source {i}", {}, accepted=True, median_ms=1.0 + i)
                store.put_share("softmax", f"{who} {i}", {})
        except Exception as exc:  # pragma: no cover - the assertion below reports it
            errors.append(exc)

    threads = [threading.Thread(target=write, args=(f"student{t}",)) for t in range(8)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert errors == []
    assert len(store.submissions("softmax")) == 8 * 25
    assert store.db.conn.execute("SELECT count(*) FROM shares").fetchone()[0] == 8 * 25
    assert {r["student"] for r in store.leaderboard("softmax")} == {f"student{t}" for t in range(8)}


def _open_at_once(data_dir: str, barrier) -> None:
    barrier.wait()
    Database(data_dir)


def test_processes_opening_a_new_database_at_once_all_open_it(tmp_path):
    # Switching a new file to WAL answers "database is locked" at once, past the busy timeout, to whoever loses
    # the race: the first submissions to a fresh server must wait for it, not fail.
    ctx = multiprocessing.get_context("fork")
    for trial in range(20):
        barrier = ctx.Barrier(8)
        procs = [ctx.Process(target=_open_at_once, args=(str(tmp_path / str(trial)), barrier)) for _ in range(8)]
        for p in procs:
            p.start()
        for p in procs:
            p.join(60)
        assert [p.exitcode for p in procs] == [0] * 8, f"trial {trial}"
        assert Database(tmp_path / str(trial)).version() == len(migrations())


def test_concurrent_writers_from_processes_lose_nothing(tmp_path):
    ctx = multiprocessing.get_context("spawn")
    procs = [ctx.Process(target=_write_submissions, args=(str(tmp_path), f"p{i}", 20)) for i in range(4)]
    for p in procs:
        p.start()
    for p in procs:
        p.join(120)
    assert [p.exitcode for p in procs] == [0, 0, 0, 0]
    store = Store(tmp_path)
    assert len(store.submissions("softmax")) == 80
    assert store.db.conn.execute("PRAGMA integrity_check").fetchone()[0] == "ok"


@pytest.mark.parametrize("sql, args", [
    # params that are not JSON
    ("INSERT INTO submissions (exercise, student, source, params, status, median_ms, created_at) "
     "VALUES ('e', 's', 'x', 'not json', 'accepted', 1.0, 0)", ()),
    # an accepted submission without a time
    ("INSERT INTO submissions (exercise, student, source, params, status, median_ms, created_at) "
     "VALUES ('e', 's', 'x', '{}', 'accepted', NULL, 0)", ()),
    # a refused one with a time (it was never timed)
    ("INSERT INTO submissions (exercise, student, source, params, status, median_ms, created_at) "
     "VALUES ('e', 's', 'x', '{}', 'refused', 1.0, 0)", ()),
    # a status the code does not know
    ("INSERT INTO submissions (exercise, student, source, params, status, median_ms, created_at) "
     "VALUES ('e', 's', 'x', '{}', 'winner', 1.0, 0)", ()),
    # a share id that is not a short alphanumeric id
    ("INSERT INTO shares (id, kernel, source, params, created_at) VALUES ('../../etc', 'k', '', '{}', 0)", ()),
    # a share whose params are a list, not an object
    ("INSERT INTO shares (id, kernel, source, params, created_at) VALUES ('abcdefgh12', 'k', '', '[1]', 0)", ()),
    # a password stored in clear
    ("INSERT INTO students (name, password_hash, created_at) VALUES ('Ada', 'hunter2', 0)", ()),
])
def test_a_corrupt_row_is_refused(tmp_path, sql, args):
    store = Store(tmp_path)
    with pytest.raises(StoreError, match="refused"):
        with store.db.transaction() as conn:
            conn.execute(sql, args)
    with pytest.raises(sqlite3.IntegrityError):  # also outside our transaction helper
        store.db.conn.execute(sql, args)


def test_a_refused_write_changes_nothing(tmp_path):
    store = Store(tmp_path)
    with pytest.raises(StoreError):
        with store.db.transaction() as conn:
            conn.execute("INSERT INTO submissions (exercise, student, source, params, status, median_ms, "
                         "created_at) VALUES ('e', 's', 'x', '{}', 'accepted', 1.0, 0)")
            conn.execute("INSERT INTO submissions (exercise, student, source, params, status, median_ms, "
                         "created_at) VALUES ('e', 's', 'x', '{}', 'accepted', -1.0, 0)")
    assert store.submissions() == []


def test_passwords_are_stored_hashed_with_a_salt(tmp_path):
    store = Store(tmp_path)
    store.add_students({"Ada": "same", "Grace": "same"})
    hashes = [r[0] for r in store.db.query("SELECT password_hash FROM students")]
    assert all(h.startswith("scrypt$") and "same" not in h for h in hashes)
    assert hashes[0] != hashes[1]
    assert store.check_student("Ada", "same") and not store.check_student("Ada", "Same")
    assert not store.check_student("Nobody", "same")


def test_a_board_reset_hides_earlier_submissions_from_the_board_only(tmp_path):
    store = Store(tmp_path)
    store.add_submission("gemm", "Ada", "a", {}, accepted=True, median_ms=2.0, baseline_ms=1.0)
    store.add_submission("gemm", "Ada", "b", {}, accepted=True, median_ms=1.0, baseline_ms=1.0)
    store.add_submission("gemm", "Grace", "c", {}, accepted=False, message="wrong at a hidden shape")
    board = store.leaderboard("gemm")
    assert [(r["student"], r["median_ms"], r["attempts"]) for r in board] == [("Ada", 1.0, 2)]
    store.reset_board("gemm")
    assert store.leaderboard("gemm") == []
    assert len(store.submissions("gemm")) == 3
    store.add_submission("gemm", "Grace", "d", {}, accepted=True, median_ms=3.0, baseline_ms=1.5)
    assert [(r["student"], r["speedup"]) for r in store.leaderboard("gemm")] == [("Grace", 0.5)]
    assert json.loads(json.dumps(store.submission(4)))["source"] == "d"


def test_a_write_that_cannot_get_the_lock_in_time_is_a_store_error_not_a_crash(tmp_path, monkeypatch):
    # The page catches StoreError and tells the student; a raw sqlite3 error would reach them as a bare "Error".
    import playground.store.db as db_module
    monkeypatch.setattr(db_module, "BUSY_TIMEOUT_MS", 200)
    store = Store(tmp_path)
    holder = sqlite3.connect(tmp_path / db_module.FILE_NAME, isolation_level=None)
    holder.execute("BEGIN IMMEDIATE")  # another process in the middle of a long write
    try:
        with pytest.raises(StoreError, match="cannot be written now"):
            store.add_submission("softmax", "ann", "source", {}, accepted=True, median_ms=1.0)
    finally:
        holder.execute("ROLLBACK")
    store.add_submission("softmax", "ann", "source", {}, accepted=True, median_ms=1.0)  # and works once it is free
    assert len(store.submissions("softmax")) == 1


def test_a_database_of_the_earlier_schema_migrates_with_its_rows_kept(tmp_path):
    # A class's database made before the course tables (schema 2): opening it adds them, and its rows read back.
    from playground.store.db import FILE_NAME, _statements
    conn = sqlite3.connect(tmp_path / FILE_NAME, isolation_level=None)
    conn.execute("CREATE TABLE schema_version (version INTEGER PRIMARY KEY, applied_at REAL NOT NULL)")
    for version, path in migrations()[:2]:
        for statement in _statements(path.read_text()):
            conn.execute(statement)
        conn.execute("INSERT INTO schema_version VALUES (?, 0)", (version,))
    conn.execute("INSERT INTO submissions (exercise, student, source, params, status, median_ms, baseline_ms, "
                 "created_at) VALUES ('gemm', 'Ada', 'src', '{}', 'accepted', 1.0, 2.0, 0)")
    conn.execute("INSERT INTO students (name, password_hash, created_at) VALUES ('Ada', 'scrypt$x', 0)")
    conn.close()
    store = Store(tmp_path)
    assert store.db.version() == len(migrations()) >= 3
    (row,) = store.leaderboard("gemm")
    assert (row["student"], row["gpu"], row["sol_percent"], row["late"], row["record"]) == ("Ada", None, None, False,
                                                                                          {})
    assert store.submission(1)["flag"] is None and store.students() == ["Ada"]
    assert store.roster()[0]["submissions"] == 1


@pytest.mark.parametrize("sql", [
    "INSERT INTO flags (submission, reason, created_at) VALUES (1, '', 0)",  # a flag says why
    "INSERT INTO flags (submission, reason, created_at) VALUES (999, 'x', 0)",  # of a submission that exists
    "INSERT INTO aliases (student, alias, created_at) VALUES ('Ada', 'x', 0)",  # a name of 2 to 24 characters
    "INSERT INTO aliases (student, alias, created_at) VALUES ('Ada', ' padded', 0)",
    "INSERT INTO activity (exercise, student, action, ok, created_at) VALUES ('e', 's', 'tune', 1, 0)",
    "INSERT INTO activity (exercise, student, action, ok, median_ms, created_at) VALUES ('e', 's', 'run', 1, -1, 0)",
    "INSERT INTO announcements (text, created_at) VALUES (printf('%.2001c', 'x'), 0)",
    "UPDATE submissions SET record = 'not json' WHERE id = 1",
    "UPDATE submissions SET sol_percent = 0 WHERE id = 1",
])
def test_the_course_tables_refuse_rows_that_make_no_sense(tmp_path, sql):
    store = Store(tmp_path)
    store.add_submission("gemm", "Ada", "src", {}, accepted=True, median_ms=1.0)
    with pytest.raises(StoreError, match="refused"):
        with store.db.transaction() as conn:
            conn.execute(sql)


def test_flags_aliases_announcements_extensions_and_activity_round_trip(tmp_path):
    store = Store(tmp_path)
    first = store.add_submission("gemm", "Ada", "a", {}, accepted=True, median_ms=1.0, sol_percent=40.0, gpu="H100",
                                 record={"driver": "580"}, late=True)
    store.add_submission("gemm", "Grace", "b", {}, accepted=True, median_ms=2.0, sol_percent=60.0, gpu="H200")
    assert [r["student"] for r in store.leaderboard("gemm")] == ["Grace", "Ada"]  # the larger share first
    assert store.flag(first, "copied") and not store.flag(999, "x")
    assert store.submission(first)["flag"] == "copied" and [r["student"] for r in store.leaderboard("gemm")] == \
        ["Grace"]
    assert store.unflag(first) and not store.unflag(first)
    store.set_alias("Ada", "Speedy")
    with pytest.raises(StoreError):
        store.set_alias("Grace", "SPEEDY")  # unique without case
    assert store.aliases() == {"Ada": "Speedy"} and store.leaderboard("gemm")[1]["alias"] == "Speedy"
    assert store.announcement() is None
    store.announce("hello")
    assert store.announcement()["text"] == "hello"
    store.announce("")
    assert store.announcement() is None
    store.extend("gemm", "Ada", 100.0)
    store.extend("gemm", "Ada", 200.0)
    assert store.extension("gemm", "Ada") == 200.0 and store.extension("gemm", "Grace") is None
    store.add_activity("gemm", "Ada", "run", True, median_ms=0.5, sol_percent=30.0, when=5.0)
    assert [(a["action"], a["ok"], a["sol_percent"]) for a in store.activity("gemm")] == [("run", True, 30.0)]
    assert store.reset_board("gemm") and store.leaderboard("gemm") == [] and store.undo_reset("gemm")
    assert len(store.leaderboard("gemm")) == 2 and not store.undo_reset("gemm")
