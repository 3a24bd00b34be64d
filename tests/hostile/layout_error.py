# HOSTILE: a fragment read through a permutation TileLang cannot lay out
# EXPECT: stage=tilelang; message=layout
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the REPLACE line becomes the WITH line)
# REPLACE:                     A_local[i] += B_local[i]
# WITH:                     A_local[i] += B_local[(i * 7) % block_N]  # a permuted read: no fragment layout fits
