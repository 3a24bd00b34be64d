# HOSTILE: exhausting GPU memory while making the inputs
# EXPECT: stage=device|internal; message=out of memory; action=run
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the lines below go after the AFTER line)
# AFTER: def make_inputs(N, dtype, device, generator):
    # ---- HOSTILE (gpu_memory_bomb): take GPU memory 1 GiB at a time until there is none
    hog = [torch.empty(2**30, dtype=torch.uint8, device=device) for _ in range(4096)]
    # ---- end of the hostile part
