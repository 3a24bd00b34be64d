# HOSTILE: a call to a CUDA function that does not exist
# EXPECT: stage=nvcc; message=no_such_function; line=no_such_function
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the REPLACE line becomes the WITH line)
# REPLACE:                     A_local[i] += B_local[i]
# WITH:                     A_local[i] += T.call_extern(dtype, "no_such_function", B_local[i])
