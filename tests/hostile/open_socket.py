# HOSTILE: opening a TCP connection to a server on the host's loopback (the test listens there)
# EXPECT: stage=python; message=sealed
# (inserted into kernels/vector_add.py after its imports by tests/test_jobs_hostile.py)
# ---- HOSTILE (open_socket): opening a TCP connection to a server on the host's loopback (the test listens there)
import socket
PORT = 47613  # the test replaces this with the port it listens on
try:
    socket.create_connection(('127.0.0.1', PORT), timeout=5).close()
except OSError as exc:
    raise RuntimeError(f'sealed: no network ({exc})')
raise RuntimeError('LEAK: connected to the host')
# ---- end of the hostile part
