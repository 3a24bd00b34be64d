# HOSTILE: reading another job's folder (the test puts that job's path here)
# EXPECT: stage=python; message=sealed
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (read_other_job): reading another job's folder (the test puts that job's path here)
import os
OTHER = '/nonexistent/other-job'  # the test replaces this with a live job's folder
found = []
for root, dirs, files in os.walk(OTHER):
    found += files
try:
    found.append(open(os.path.join(OTHER, 'secret.txt')).read())
except OSError:
    pass
if found:
    raise RuntimeError(f'LEAK: {found}')
raise RuntimeError('sealed: the other job is out of sight')
# ---- end of the hostile part
