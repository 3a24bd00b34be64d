# HOSTILE: an out-of-bounds write far past the output (the CUDA context is lost)
# EXPECT: stage=device; message=illegal memory access|CUDA error|context; action=run
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the lines below go after the AFTER line)
# AFTER:             start = bx * block_N
            # ---- HOSTILE (gpu_oob_write): a store 2 TiB past the end of C: an illegal address, the CUDA context is lost
            # (TileLang guards stores it cannot prove in bounds, so the store goes through a view of C that claims
            # to be 2**41 elements long: the guard passes, the address does not exist.)
            C_huge = T.Tensor((2**41,), dtype, C.data)
            C_huge[T.int64(2**40) + bx] = A[0]
            # ---- end of the hostile part
