"""A private redis-server for the test scripts written in Python: started on
a free port of 127.0.0.1, in a temporary folder, with no persistence, and
killed when the `with` block ends. (The C++ tests have their own harness,
tests/support/redis_server.hpp.)

    with private_redis() as (port, cli):
        subprocess.run(cli + ["PING"])

With tls=True the server listens on TLS only (--port 0 --tls-port), with a
CA and a server certificate for 127.0.0.1 made by openssl in its folder;
`cli` then speaks TLS, and tls_ca(cli) is the CA's file.
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


def make_certificates(d):
    """A CA (d/ca.crt) and a server certificate for 127.0.0.1 signed by it
    (d/server.crt, d/server.key), EC P-256, valid for two days."""
    def run(*args):
        subprocess.run(["openssl", *args], check=True, capture_output=True, cwd=d)
    ec = ["-newkey", "ec", "-pkeyopt", "ec_paramgen_curve:prime256v1", "-nodes"]
    run("req", "-x509", *ec, "-keyout", "ca.key", "-out", "ca.crt", "-days", "2", "-subj", "/CN=dlock check CA")
    run("req", "-new", *ec, "-keyout", "server.key", "-out", "server.csr", "-subj", "/CN=127.0.0.1")
    with open(f"{d}/server.ext", "w") as f:
        f.write("subjectAltName=IP:127.0.0.1\nextendedKeyUsage=serverAuth\n")
    run("x509", "-req", "-in", "server.csr", "-CA", "ca.crt", "-CAkey", "ca.key", "-CAcreateserial",
        "-out", "server.crt", "-days", "2", "-extfile", "server.ext")


def tls_ca(cli):
    """The CA file of a TLS server's redis-cli command list."""
    return cli[cli.index("--cacert") + 1]


@contextlib.contextmanager
def private_redis(tls=False):
    """Yields (port, cli): the server's port and a redis-cli command list for it."""
    port = free_port()
    with tempfile.TemporaryDirectory() as d:
        listen = ["--port", str(port)]
        cli = ["redis-cli", "-p", str(port)]
        if tls:
            make_certificates(d)
            listen = ["--port", "0", "--tls-port", str(port), "--tls-cert-file", f"{d}/server.crt",
                      "--tls-key-file", f"{d}/server.key", "--tls-ca-cert-file", f"{d}/ca.crt",
                      "--tls-auth-clients", "no"]
            cli += ["--tls", "--cacert", f"{d}/ca.crt"]
        server = subprocess.Popen(["redis-server", *listen, "--bind", "127.0.0.1", "--save", "",
                                   "--appendonly", "no", "--dir", d], stdout=subprocess.DEVNULL)
        try:
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
