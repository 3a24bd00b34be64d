# HOSTILE: a 10 GB allocation at import time
# EXPECT: stage=python; message=MemoryError|memory
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (alloc_10gb): a 10 GB allocation at import time
hog = bytearray(10 * 2**30)
hog[::4096] = b'x' * len(hog[::4096])  # touch every page
# ---- end of the hostile part
