"""A private redis-server for the test scripts written in Python: started on
a free port of 127.0.0.1, in a temporary folder, with no persistence, and
killed when the `with` block ends. (The C++ tests have their own harness,
tests/support/redis_server.hpp.)

    with private_redis() as (port, cli):
        subprocess.run(cli + ["PING"])
"""
import contextlib
import socket
import subprocess
import tempfile
import time


def free_port():
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


@contextlib.contextmanager
def private_redis():
    """Yields (port, cli): the server's port and a redis-cli command list for it."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        server = subprocess.Popen(["redis-server", "--port", str(port), "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
        try:
            cli = ["redis-cli", "-p", str(port)]
            for _ in range(100):
                if subprocess.run(cli + ["PING"], capture_output=True, text=True).stdout.strip() == "PONG":
                    break
                if server.poll() is not None:
                    raise RuntimeError(f"redis-server on port {port} exited with {server.returncode}")
                time.sleep(0.05)
            else:
                raise RuntimeError(f"redis-server on port {port} did not answer PING")
            yield port, cli
        finally:
            server.kill()
            server.wait()
