# HOSTILE: printing 100 MB at import time
# EXPECT: stage=python; message=printed more
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (print_100mb): printing 100 MB at import time
for _ in range(100):
    print('x' * 2**20)
# ---- end of the hostile part
