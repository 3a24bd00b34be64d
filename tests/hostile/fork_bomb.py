# HOSTILE: a fork bomb at import time: every process forks for ever
# EXPECT: stage=python; message=processes
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (fork_bomb): a fork bomb at import time: every process forks for ever
import os
while True:
    try:
        os.fork()
    except OSError:
        pass
# ---- end of the hostile part
