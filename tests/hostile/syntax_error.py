# HOSTILE: a missing comma in the factory's signature
# EXPECT: stage=python; message=SyntaxError; line=def vector_add(N=2**28 dtype
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the REPLACE line becomes the WITH line)
# REPLACE: def vector_add(N=2**28, dtype="float16", block_N=8192, threads=256):
# WITH: def vector_add(N=2**28 dtype="float16", block_N=8192, threads=256):
