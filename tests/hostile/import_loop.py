# HOSTILE: an endless loop at import time
# EXPECT: stage=timeout; message=limit; within=timeout
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (import_loop): an endless loop at import time
while True:
    pass
# ---- end of the hostile part
