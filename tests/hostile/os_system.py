# HOSTILE: os.system: a shell that tries to change the repository and the host's /tmp
# EXPECT: stage=python; message=sealed
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (os_system): os.system: a shell that tries to change the repository and the host's /tmp
import os, playground
repo = os.path.dirname(os.path.dirname(playground.__file__))
status = os.system(f'echo pwned > {repo}/PWNED; echo pwned > /tmp/PWNED_HOST; echo pwned > /var/tmp/PWNED_HOST')
if os.path.exists(f'{repo}/PWNED'):
    raise RuntimeError('LEAK: wrote into the repository')
raise RuntimeError(f'sealed: the shell ran (status {status}) but could not write outside the job')
# ---- end of the hostile part
