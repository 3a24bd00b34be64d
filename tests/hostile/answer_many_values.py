# HOSTILE: a well-formed answer of 7 MiB that is 2.4 million empty lists (300 MiB of objects once parsed), at import time
# EXPECT: stage=python; message=its answer held more than 200000 values
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (answer_many_values): an answer small in bytes, huge in objects, then the job ends
import os
_data = memoryview(b'{"result": {"ok": true, "kernel": "vector_add", "line_map": [' + b"[]," * (7 * 2**20 // 3)
                   + b'[]], "error": null}}\n')
_others = {os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)}
for _fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        _target = os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if _target.startswith("pipe:") and _target not in _others:
        while _data:
            _data = _data[os.write(_fd, _data):]
        os._exit(0)
# ---- end of the hostile part
