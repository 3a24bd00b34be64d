# HOSTILE: a kernel that never ends (an endless loop inside the T.prim_func)
# EXPECT: stage=timeout; message=limit; action=run
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the lines below go after the AFTER line)
# AFTER:             start = bx * block_N
            # ---- HOSTILE (gpu_hang): every block spins for ever; A[0] never changes, so the loop never ends
            while A[0] == A[0]:
                C[start] = C[start] + A[0]
            # ---- end of the hostile part
