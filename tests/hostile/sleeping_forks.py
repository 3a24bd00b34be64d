# HOSTILE: 60 sleeping forks of the worker at import time (little memory of their own: they share the parent's; summed
# resident sizes counted the worker 60 times over, past the 6 GiB bound)
# EXPECT: stage=python; message=^importing the kernel failed: RuntimeError: 60 forks slept and ended$
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (sleeping_forks): 60 sleeping forks of the worker at import time
import os, time
_children = []
for _ in range(60):
    _pid = os.fork()
    if _pid == 0:
        time.sleep(3)
        os._exit(0)
    _children.append(_pid)
for _pid in _children:
    os.waitpid(_pid, 0)
raise RuntimeError(f"{len(_children)} forks slept and ended")
# ---- end of the hostile part
