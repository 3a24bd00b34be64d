# HOSTILE: reading files outside the job folder from the factory: secrets, the rest of the repository
# EXPECT: stage=tilelang; message=sealed
# (an edit of kernels/vector_add.py, made by tests/test_jobs_hostile.py: the lines below go after the AFTER line)
# AFTER: def vector_add(N=2**28, dtype="float16", block_N=8192, threads=256):
    # ---- HOSTILE (read_outside): reading files outside the job folder from the factory: secrets, the rest of the repository
    import glob, os, playground
    repo = os.path.dirname(os.path.dirname(playground.__file__))
    leaks = []
    for path in ['/etc/shadow', '/root/.bashrc', '/proc/1/environ', repo + '/.git/config', repo + '/Makefile',
                 repo + '/tests/conftest.py', repo + '/app.py']:
        try:
            with open(path, 'rb') as f:
                f.read(1)
            leaks.append(path)
        except OSError:
            pass
    leaks += glob.glob('/tmp/playground-jobs-*/*') + glob.glob('/var/tmp/*')
    if leaks:
        raise RuntimeError(f'LEAK: read {leaks}')
    raise RuntimeError('sealed: nothing outside the job folder was readable')
    # ---- end of the hostile part
