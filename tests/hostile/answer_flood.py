# HOSTILE: 1 GiB without a newline into the job's answer pipe, found through /proc/self/fd, at import time
# EXPECT: stage=python; message=its answer was larger than
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (answer_flood): 1 GiB without a newline into the job's answer pipe, at import time
import os
_others = {os.readlink(f"/proc/self/fd/{fd}") for fd in (0, 1, 2)}
for _fd in sorted(int(n) for n in os.listdir("/proc/self/fd")):
    try:
        _target = os.readlink(f"/proc/self/fd/{_fd}")
    except OSError:
        continue
    if _target.startswith("pipe:") and _target not in _others:
        _block = b"x" * 2**20
        for _ in range(1024):
            os.write(_fd, _block)
# ---- end of the hostile part
