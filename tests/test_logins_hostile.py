"""A hostile student against the class's logins, sessions and per-address limits (playground/ui/server.py,
playground/ui/classroom.py, playground/store): the student has a login of their own, or the class password (which
takes any name), and a browser or a script.

The servers here are Gradio's, started as serve() starts the page's (server.protect around the class's endpoints),
and are talked to over HTTP as a browser or a script would."""
from __future__ import annotations

import contextlib
import csv
import io
import os
import time
from types import SimpleNamespace

import httpx
import pytest

from playground.settings import Settings, SettingsError
from playground.ui import classroom as cls
from playground.ui import server
from ports import free_port

pytestmark = [pytest.mark.timeout(300),
              pytest.mark.filterwarnings("ignore::pandas.errors.Pandas4Warning")]  # from Gradio's queue
TEACHER_PW = "teacher-secret"
CLASS_PW = "class-secret"


def room_for(tmp_path, **settings) -> cls.Classroom:
    s = Settings(data_dir=tmp_path / "data", teacher_password=TEACHER_PW, password=CLASS_PW).replace(**settings)
    return cls.Classroom(s)


@contextlib.contextmanager
def class_server(tmp_path, throttle=None, **settings):
    """The class's endpoints behind the class's login, wrapped as serve() wraps the page."""
    import gradio as gr
    room = cls.install(room_for(tmp_path, **settings))
    with gr.Blocks() as demo:
        cls.register(4, "engine")
    demo.queue()
    auth, dependency = room.gradio_auth()
    app, url, _ = demo.launch(server_name="127.0.0.1", server_port=free_port(), auth=auth,
                              auth_dependency=dependency, auth_message=room.login_message(),
                              prevent_thread_lock=True, quiet=True)
    try:
        server.protect(demo, app, room, throttle)
        yield SimpleNamespace(url=url.rstrip("/"), app=app, room=room, demo=demo)
    finally:
        demo.close()
        cls.install(None)


def log_in(base: str, name: str, password: str, browser: httpx.Client | None = None, **headers) -> httpx.Response:
    return (browser or httpx).post(base + "/login", data={"username": name, "password": password}, headers=headers,
                                   timeout=60)


def browser_of(base: str, name: str, password: str) -> httpx.Client:
    """A browser logged in (its cookies kept)."""
    browser = httpx.Client(timeout=60)
    answer = log_in(base, name, password, browser)
    assert answer.status_code == 200, answer.text
    return browser


def who(base: str, browser: httpx.Client) -> str | None:
    """Whom the server takes this browser's session for (None: no session)."""
    return browser.get(base + "/gradio_api/user").json()


def passwords(answer: dict) -> dict[str, str]:
    assert answer["ok"], answer
    return {r["name"]: r["password"] for r in csv.DictReader(io.StringIO(answer["csv"]))}


class Quick(server.LoginThrottle):
    """The throttle with small numbers, so a test reaches its limits in a few requests."""
    FREE, DELAY, MAX_DELAY, LIMIT, ADDRESS_LIMIT, DEVICE_LIMIT = 2, 0.01, 0.02, 5, 12, 4


# -- sessions across a restart of the server ---------------------------------------------------------------------------
def test_a_roster_students_session_outlives_a_restart_but_not_a_new_password_a_removal_or_a_logout(tmp_path):
    # A restart mid-lab logged every student out: Gradio keeps its sessions in memory, and draws its cookie's name
    # at random at each start. A student's session is kept now; what ends it before a restart ends it after one.
    with class_server(tmp_path) as s:
        mine = passwords(s.room.import_roster("teacher", "", "Ada Lovelace\nGrace Hopper\nAlan Turing\n"))
        ada, grace, alan = (browser_of(s.url, n, mine[n]) for n in ("Ada Lovelace", "Grace Hopper", "Alan Turing"))
        teacher = browser_of(s.url, "teacher", TEACHER_PW)
        kept = s.room.store.db.query("SELECT * FROM sessions")
        assert sorted(r["user"] for r in kept) == ["Ada Lovelace", "Alan Turing", "Grace Hopper"], \
            "the teacher's session is not kept (a digest of its password would be a guess to check offline)"
        assert all(r["digest"] not in str(dict(ada.cookies)) for r in kept), "the token's digest, never the token"
    with class_server(tmp_path) as s:  # the next server, on the same data
        assert who(s.url, ada) == "Ada Lovelace" and who(s.url, grace) == "Grace Hopper"
        assert who(s.url, teacher) is None  # logs in again
        forged = httpx.Client(timeout=60, cookies={name: "x" * 43 for name in ada.cookies})
        assert who(s.url, forged) is None
        s.room.reset_password("teacher", "", "Grace Hopper")
        s.room.remove_student("teacher", "", "Alan Turing")
        ada.get(s.url + "/logout")
    with class_server(tmp_path) as s:
        assert who(s.url, grace) is None and who(s.url, alan) is None  # a new password, a removal: ended for good
        assert who(s.url, ada) is None  # logged out before the restart
        assert s.room.store.db.query("SELECT * FROM sessions") == []


def test_one_students_many_logins_push_out_only_their_own_kept_sessions(tmp_path):
    with class_server(tmp_path) as s:
        mine = passwords(s.room.import_roster("teacher", "", "Grace Hopper\nMallory\n"))
        grace = browser_of(s.url, "Grace Hopper", mine["Grace Hopper"])
        for _ in range(s.room.store.SESSIONS_PER_USER + 4):
            browser_of(s.url, "Mallory", mine["Mallory"])
        kept = [r["user"] for r in s.room.store.db.query("SELECT user FROM sessions")]
        assert kept.count("Mallory") == s.room.store.SESSIONS_PER_USER and kept.count("Grace Hopper") == 1
    with class_server(tmp_path) as s:
        assert who(s.url, grace) == "Grace Hopper"


# -- sessions and a roster: an import ends every session it no longer accepts ------------------------------------------
def test_a_roster_import_ends_class_password_sessions_even_under_a_name_the_roster_holds(tmp_path):
    with class_server(tmp_path) as s:
        ada = browser_of(s.url, "Ada Lovelace", CLASS_PW)  # before any roster: the class password, her name
        teacher = browser_of(s.url, "teacher", TEACHER_PW)
        assert who(s.url, ada) == "Ada Lovelace"
        mine = passwords(s.room.import_roster("teacher", "", "Ada Lovelace\nGrace Hopper\n"))
        assert who(s.url, ada) is None, "a session of the class password ends, whatever name it took"
        assert who(s.url, teacher) == "teacher"
        assert log_in(s.url, "Ada Lovelace", CLASS_PW).status_code == 400
        ada = browser_of(s.url, "Ada Lovelace", mine["Ada Lovelace"])
        grace = browser_of(s.url, "Grace Hopper", mine["Grace Hopper"])
        passwords(s.room.import_roster("teacher", "", "Alan Turing\n"))  # a student added: others' passwords hold
        assert (who(s.url, ada), who(s.url, grace)) == ("Ada Lovelace", "Grace Hopper")
        passwords(s.room.import_roster("teacher", "", "Grace Hopper\n"))  # Grace's password replaced
        assert who(s.url, grace) is None, "a session of a password the roster no longer holds ends"
        assert who(s.url, ada) == "Ada Lovelace" and who(s.url, teacher) == "teacher"


def test_the_login_page_says_to_use_ones_own_password_once_a_roster_is_in_force(tmp_path):
    with class_server(tmp_path) as s:
        before = httpx.get(s.url + "/", timeout=60).text
        assert "class password" in before
        passwords(s.room.import_roster("teacher", "", "Ada Lovelace\n"))
        after = httpx.get(s.url + "/", timeout=60).text
        assert "own password" in after and "not the class password" in after


def test_a_student_logs_in_only_under_the_name_as_the_roster_spells_it(tmp_path):
    # Each spelling a session kept would be a student of its own to the limits (jobs in flight, share links):
    # with extra spaces, a tab or a no-break space, Ada's own password opens no session.
    with class_server(tmp_path) as s:
        mine = passwords(s.room.import_roster("teacher", "", "Ada Lovelace\n"))
        for variant in ("Ada  Lovelace", "Ada\tLovelace", "Ada\u00a0Lovelace", "Ada \u3000Lovelace"):
            assert log_in(s.url, variant, mine["Ada Lovelace"]).status_code == 400, repr(variant)
        assert who(s.url, browser_of(s.url, " Ada Lovelace ", mine["Ada Lovelace"])) == "Ada Lovelace"


def test_the_limits_count_a_proxys_user_header_by_the_name_as_the_class_spells_it():
    from playground.ui.gateway import student_of
    keys = {str(student_of(SimpleNamespace(username=name, client=None, headers={})))
            for name in ("Ada Lovelace", "Ada  Lovelace", "Ada\tLovelace", " Ada\u00a0Lovelace")}
    assert keys == {"user:Ada Lovelace"}


def test_a_logged_in_student_cannot_store_files_through_gradios_upload_route(tmp_path):
    # The page uploads nothing; the route would keep any size of anything, for good, where the jobs run.
    import tempfile
    import uuid
    from pathlib import Path
    name = f"filler-{uuid.uuid4().hex}.bin"
    with class_server(tmp_path) as s:
        ada = browser_of(s.url, "Ada Lovelace", CLASS_PW)
        answer = ada.post(s.url + "/gradio_api/upload", files={"files": (name, b"x" * (1 << 20))})
        assert answer.status_code == 403 and server.UPLOADS_REFUSED in answer.text
        assert ada.post(s.url + "/gradio_api/upload?upload_id=x", files={"files": (name, b"a")}).status_code == 403
    gradio_tmp = Path(os.environ.get("GRADIO_TEMP_DIR") or Path(tempfile.gettempdir()) / "gradio")
    assert not list(gradio_tmp.glob(f"*/{name}")), "nothing of the upload was kept"


# -- login CSRF: another site may not log a student's browser in as someone else, or out -------------------------------
@pytest.mark.parametrize("headers", [
    {"Origin": "http://evil.example"},
    {"Origin": "null"},  # a sandboxed frame, or a redirect across sites
    {"Referer": "http://evil.example/trap.html"},
    {"Sec-Fetch-Site": "cross-site"},
    {"Referer": "http://[::1/broken"},  # no address at all: refused, never a server error
], ids=["origin", "null-origin", "referer", "fetch-metadata", "broken-referer"])
def test_a_login_or_logout_sent_from_another_site_is_refused(tmp_path, headers):
    with class_server(tmp_path) as s:
        forced = log_in(s.url, "Mallory", CLASS_PW, **headers)
        assert forced.status_code == 403 and "another site" in forced.json()["detail"]
        assert "set-cookie" not in forced.headers, "the browser got no session of the other site's choosing"
        own = {"Origin": s.url, "Referer": s.url + "/", "Sec-Fetch-Site": "same-origin"}
        ada = httpx.Client(timeout=60)
        assert log_in(s.url, "Ada", CLASS_PW, ada, **own).status_code == 200
        out = ada.get(s.url + "/logout", headers=headers, follow_redirects=False)
        assert out.status_code == 403 and who(s.url, ada) == "Ada", "a link on another site does not log her out"
        assert ada.get(s.url + "/logout", headers=own, follow_redirects=False).status_code == 302
        assert who(s.url, ada) is None


def test_the_page_header_names_who_is_logged_in_and_offers_to_log_out(tmp_path):
    import gradio as gr
    from starlette.requests import Request
    from playground.ui.layout import Page
    cls.install(room_for(tmp_path))
    try:
        page = Page()
        demo = page.build()
        shows = [f for f in demo.fns.values() if any(event == "load" for _, event in f.targets)
                 and page.course.who in f.outputs]
        assert len(shows) == 1

        def request(user):
            scope = {"type": "http", "client": ("10.0.0.1", 40000), "headers": [], "method": "GET", "path": "/",
                     "query_string": b""}
            return gr.Request(request=Request(scope), username=user)
        shown = shows[0].fn(request("Ada <Lovelace>"))
        html = shown["value"]
        assert shown["visible"] and "Ada &lt;Lovelace&gt;" in html and "<Lovelace>" not in html
        assert 'href="logout"' in html and "Log out" in html
        assert shows[0].fn(request(None))["visible"] is False, "no login, nobody to name"
    finally:
        cls.install(None)


# -- whose address: X-Forwarded-For only from a trusted proxy ----------------------------------------------------------
def test_x_forwarded_for_sent_straight_to_the_server_is_not_believed(tmp_path):
    with class_server(tmp_path, Quick()) as s:
        codes = [log_in(s.url, "teacher", f"guess-{i}", **{"X-Forwarded-For": f"203.0.113.{i}"}).status_code
                 for i in range(Quick.LIMIT + 3)]
        assert codes == [400] * Quick.LIMIT + [429] * 3, "each guess claimed another address; all came from one"


def test_the_share_limit_per_address_counts_the_connecting_address_not_a_claimed_one(tmp_path):
    from gradio_client import Client
    with class_server(tmp_path) as s:
        s.room.SHARES_PER_ADDRESS = 1
        answers = [Client(s.url, auth=(f"name-{i}", CLASS_PW), headers={"X-Forwarded-For": f"203.0.113.{i}"},
                          verbose=False).predict("gemm", f"# {i}\n", {}, None, api_name="/share") for i in range(2)]
        assert answers[0]["ok"] and not answers[1]["ok"], answers
        assert "from this address" in answers[1]["error"]["message"]


def test_behind_a_trusted_proxy_the_address_it_forwards_is_the_clients(tmp_path):
    with class_server(tmp_path, Quick(), trusted_proxies="127.0.0.1") as s:
        # The proxy appends the address a request came from to whatever X-Forwarded-For the client sent.
        codes = [log_in(s.url, "teacher", f"guess-{i}", **{"X-Forwarded-For": f"198.51.100.{i}, 203.0.113.9"})
                 .status_code for i in range(Quick.LIMIT + 1)]
        assert codes == [400] * Quick.LIMIT + [429], "the client's own claim, left of the proxy's entry, is not"
        behind = log_in(s.url, "teacher", TEACHER_PW, **{"X-Forwarded-For": "203.0.113.10"})
        assert behind.status_code == 200, "another client behind the proxy is another address"


def test_the_client_address_is_the_peer_unless_a_trusted_proxy_forwarded_it():
    trusted = Settings(trusted_proxies="127.0.0.1, 10.0.0.0/8, ::1").trusted_proxy_networks()
    assert cls.resolve_client("127.0.0.1", ["6.6.6.6, 203.0.113.9"], ()) == "127.0.0.1", "no proxy trusted"
    assert cls.resolve_client("127.0.0.1", ["6.6.6.6, 203.0.113.9"], trusted) == "203.0.113.9"
    assert cls.resolve_client("::1", ["6.6.6.6", "203.0.113.9, 10.1.2.3"], trusted) == "203.0.113.9", "a chain"
    assert cls.resolve_client("192.0.2.1", ["6.6.6.6"], trusted) == "192.0.2.1", "a peer that is no proxy"
    assert cls.resolve_client("127.0.0.1", [], trusted) == "127.0.0.1"
    assert cls.resolve_client("127.0.0.1", ["x" * 5000], trusted) == "x" * 64, "a junk entry, cut short"
    assert Settings().trusted_proxy_networks() == ()
    with pytest.raises(SettingsError, match="PLAYGROUND_TRUSTED_PROXIES"):
        Settings(trusted_proxies="127.0.0.1, proxy.school.example").trusted_proxy_networks()


# -- students' guesses cost them, not the teacher ----------------------------------------------------------------------
def test_students_failing_logins_as_the_teacher_do_not_lock_the_teachers_browser_out(tmp_path):
    with class_server(tmp_path, Quick()) as s:
        teachers = browser_of(s.url, "teacher", TEACHER_PW)  # she logged in from this browser before
        mallory = browser_of(s.url, "Mallory", CLASS_PW)  # so did Mallory, from hers
        for i in range(Quick.ADDRESS_LIMIT):  # the class's address, failing as the teacher (then under other
            log_in(s.url, "teacher" if i < Quick.LIMIT else f"name-{i}", f"guess-{i}", mallory)  # names) till locked
        unknown = log_in(s.url, "teacher", TEACHER_PW)
        assert unknown.status_code == 429, "a browser the server does not know meets the guessers' lock"
        assert log_in(s.url, "Grace", CLASS_PW).status_code == 429, "the address's ceiling holds for new names"
        assert log_in(s.url, "teacher", TEACHER_PW, teachers).status_code == 200, "her own browser logs in"
        name = next(c.name for c in teachers.cookies.jar if c.name.startswith("pg-device-"))
        forged = httpx.Client(timeout=60, cookies={name: "v1.AAAAAAAAAAAAAAAAAAAAAA.BBBBBBBBBBBBBBBBBBBBBB"})
        assert log_in(s.url, "teacher", TEACHER_PW, forged).status_code == 429, "a cookie not of the server's"
        # A device cookie is throttled on its own failures: a stolen one is no fresh allowance either.
        codes = [log_in(s.url, "teacher", f"typo-{i}", teachers).status_code for i in range(Quick.DEVICE_LIMIT)]
        assert codes == [400] * Quick.DEVICE_LIMIT
        refused = log_in(s.url, "teacher", TEACHER_PW, teachers)
        assert refused.status_code == 429 and "this browser" in refused.json()["detail"]


def test_a_browser_is_known_for_a_name_only_while_the_password_it_logged_in_with_holds(tmp_path):
    with class_server(tmp_path, Quick()) as s:
        ada = browser_of(s.url, "Ada", CLASS_PW)  # a device cookie for Ada, from a login with the class password
        passwords(s.room.import_roster("teacher", "", "Ada\n"))  # now Ada's own password: that cookie stands for none
        codes = [log_in(s.url, "Ada", f"guess-{i}", ada).status_code for i in range(Quick.LIMIT)]
        refused = log_in(s.url, "Ada", "guess", ada)
        assert codes == [400] * Quick.LIMIT and refused.status_code == 429
        assert "for this name" in refused.json()["detail"], "counted as any browser's guesses at Ada's password"


def test_wrong_teacher_passwords_on_the_page_cost_the_guessers_not_the_teacher(tmp_path):
    room = room_for(tmp_path)
    names = [f"zed{i}" for i in range(room.TEACHER_TRIES_ADDRESS // room.TEACHER_TRIES + 2)]
    answers = [room.all_submissions(n, f"guess-{n}-{g}", address="203.0.113.9")
               for n in names for g in range(room.TEACHER_TRIES)]
    checked = [a for a in answers if "only the teacher" in a["error"]["message"]]
    assert len(checked) == room.TEACHER_TRIES_ADDRESS, "one address under many names meets a ceiling"
    assert "from this address" in answers[-1]["error"]["message"]
    assert "only the teacher" in room.all_submissions("zed-new", "guess", address="198.51.100.4")["error"]["message"]
    # The teacher typing the password on the page (not logged in as 'teacher') from elsewhere is not denied, nor on
    # a server without a login, where the guessers have no name either.
    for g in range(room.TEACHER_TRIES):
        room.all_submissions(None, f"guess-{g}", address="203.0.113.10")
    assert "try again" in room.all_submissions(None, TEACHER_PW, address="203.0.113.10")["error"]["message"]
    assert room.all_submissions(None, TEACHER_PW, address="198.51.100.4")["ok"]
    assert room.all_submissions("teacher", "", address="203.0.113.9")["ok"], "nor logged in, from that address"
    assert room.all_submissions("zed0", TEACHER_PW, address="198.51.100.4")["error"]["stage"] == "permission", \
        "a name past its own tries stays refused from any address"


# -- shares: a limit in bytes, a quota per address under the class password --------------------------------------------
def test_a_share_is_limited_in_bytes_not_characters(tmp_path):
    from playground.engine.source import SOURCE_LIMIT
    room = room_for(tmp_path)
    four_bytes_each = "😀" * (SOURCE_LIMIT // 4 + 1)
    assert len(four_bytes_each) < SOURCE_LIMIT < len(four_bytes_each.encode())
    refused = room.share("gemm", four_bytes_each, {})
    assert not refused["ok"] and "at most 256 KiB" in refused["error"]["message"]
    assert room.share("gemm", "😀" * (SOURCE_LIMIT // 4), {})["ok"], "exactly the limit in bytes"
    lone = room.share("gemm", "x = '\ud800'\n", {})
    assert lone["error"]["stage"] == "parameters" and "UTF-8" in lone["error"]["message"]
    submitted = room.submit("Ada", "vector_add", four_bytes_each, {})
    assert submitted["error"]["stage"] == "parameters" and "256 KiB" in submitted["error"]["message"]


def test_with_the_class_password_new_share_links_are_counted_per_address_too(tmp_path):
    import gradio as gr
    from starlette.requests import Request
    room = cls.install(room_for(tmp_path))
    room.SHARES, room.SHARES_PER_ADDRESS = 2, 3

    def request(address, username):
        scope = {"type": "http", "client": (address, 40000), "headers": [], "method": "POST", "path": "/",
                 "query_string": b""}
        return gr.Request(request=Request(scope), username=username)
    try:
        made = [cls.share("gemm", f"# {n} {i}\n", {}, None, request("10.0.0.1", n)) for n in "abc" for i in range(2)]
        assert [m["ok"] for m in made] == [True] * 3 + [False] * 3, "fresh names from one address"
        assert "from this address" in made[-1]["error"]["message"]
        assert cls.share("gemm", "# d\n", {}, None, request("10.0.0.2", "d"))["ok"], "another address"
        passwords(room.import_roster("teacher", "", "e\nf\n"))  # a roster: names are people, the quota theirs
        assert all(cls.share("gemm", f"# {n} {i}\n", {}, None, request("10.0.0.1", n))["ok"]
                   for n in "ef" for i in range(2))
    finally:
        cls.install(None)


# -- who is on the roster: the login's timing does not tell ------------------------------------------------------------
def test_a_login_takes_as_long_for_a_name_off_the_roster_as_for_one_on_it(tmp_path):
    room = room_for(tmp_path)
    passwords(room.import_roster("teacher", "", "Ada Lovelace\n"))

    # The two names take turns, and each side's fastest login is compared: a leak shows in every login (42-58 ms
    # against 2-3 ms, before the fix), while a burst of load on a busy machine slows some logins of either name.
    times = {"Ada Lovelace": [], "Nobody Here": []}
    for i in range(15):
        for name, samples in times.items():
            started = time.perf_counter()
            assert not room.login(name, f"wrong-{i}")
            samples.append((time.perf_counter() - started) * 1000)
    on, off = min(times["Ada Lovelace"]), min(times["Nobody Here"])
    assert abs(on - off) < 10 or max(on, off) < 2 * min(on, off), f"on the roster {on:.1f} ms, off it {off:.1f} ms"
