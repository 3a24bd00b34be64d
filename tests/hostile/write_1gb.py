# HOSTILE: writing a 1 GB file at import time
# EXPECT: stage=python; message=File too large|wrote more
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (write_1gb): writing a 1 GB file at import time
with open('big.bin', 'wb') as f:
    for _ in range(1024):
        f.write(b'x' * 2**20)
# ---- end of the hostile part
