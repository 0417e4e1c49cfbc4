#!/usr/bin/env python3
"""dlock as an installed package: installs this build into a temporary
folder (meson install --destdir), then builds tests/consumers/consumer.cpp
against it twice, as a user would:
- a CMake project: find_package(dlock 0.1) and dlock::dlock;
- a Meson project: dependency('dlock') through pkg-config.
Each program runs against a private redis-server and checks that its locks
exclude a second client and that dlock::version() is the project's version.
Both must use the installed copy, not the source tree nor another install
(say an older one in /usr/local, which compilers and the loader search by
default): every dlock header their compiles read (Ninja's record of the
compiler's depfiles) must be under the temporary folder, and the CMake
consumer must load libdlock from there through its own RUNPATH, with no
LD_LIBRARY_PATH.

usage: check_consumers.py MESON BUILD_DIR VERSION -- CXX [ARGS...]
"""
import json
import os
import shutil
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(HERE, "..", "support"))
from private_redis import private_redis  # noqa: E402


def fail(msg):
    print("check_consumers: " + msg, file=sys.stderr)
    sys.exit(1)


def run(cmd, env=None, cwd=None):
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=240)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def find_one(root, name):
    found = [os.path.join(d, name) for d, _, files in os.walk(root) if name in files]
    if len(found) != 1:
        fail(f"expected one {name} under {root}, found {found}")
    return found[0]


def dlock_headers_read(build):
    """The dlock headers the compiles in `build` read, as Ninja recorded them
    from the compiler's depfiles (`ninja -t deps`)."""
    deps = run(["ninja", "-C", build, "-t", "deps"])
    return {p.strip() for p in deps.splitlines() if "/dlock/" in p and p.strip().endswith((".hpp", ".ipp"))}


def project(tmp, kind):
    """A copy of the consumer project of this kind, with consumer.cpp."""
    src = os.path.join(tmp, kind + "-src")
    shutil.copytree(os.path.join(HERE, kind), src)
    shutil.copy(os.path.join(HERE, "consumer.cpp"), src)
    return src


def main():
    meson, build_dir, version, sep = sys.argv[1:5]
    compiler = sys.argv[5:]
    if sep != "--" or not compiler:
        fail("usage: check_consumers.py MESON BUILD_DIR VERSION -- CXX [ARGS...]")
    if os.path.basename(compiler[0]) in ("ccache", "sccache") and len(compiler) > 1:
        compiler = compiler[1:]  # the consumers' builds need the compiler itself
    cxx = compiler[0]
    for tool in ("cmake", "ninja", "pkg-config"):
        if shutil.which(tool) is None:
            fail(f"{tool} is not installed (./dev installs it)")
    with tempfile.TemporaryDirectory(prefix="dlock-consumers-") as tmp:
        dest = os.path.join(tmp, "dest")
        run([meson, "install", "-C", build_dir, "--destdir", dest, "--no-rebuild", "--quiet"])
        config = find_one(dest, "dlockConfig.cmake")
        pc = find_one(dest, "dlock.pc")
        libdir = os.path.dirname(os.path.dirname(pc))
        options = json.loads(run([meson, "introspect", build_dir, "--buildoptions"]))
        prefix = dest + next(o["value"] for o in options if o["name"] == "prefix")
        if not config.startswith(prefix + os.sep):
            fail(f"{config} is not under the install prefix {prefix}")
        env = dict(os.environ, CXX=cxx)
        env.pop("LD_LIBRARY_PATH", None)

        programs = {}
        src = project(tmp, "cmake")
        out = os.path.join(tmp, "cmake-build")
        run(["cmake", "-S", src, "-B", out, "-G", "Ninja", "-DCMAKE_BUILD_TYPE=Release",
             "-DCMAKE_PREFIX_PATH=" + prefix], env=env)
        run(["cmake", "--build", out], env=env)
        programs["cmake"] = os.path.join(out, "consumer")

        src = project(tmp, "meson")
        out = os.path.join(tmp, "meson-build")
        run([meson, "setup", out, src, "--buildtype=release"],
            env=dict(env, PKG_CONFIG_PATH=os.path.dirname(pc)))
        run(["ninja", "-C", out], env=env)
        programs["meson"] = os.path.join(out, "consumer")

        for kind in programs:
            headers = dlock_headers_read(os.path.join(tmp, kind + "-build"))
            if not headers:
                fail(f"ninja -t deps names no dlock header for the {kind} consumer: cannot tell which it used")
            inside = os.path.realpath(dest) + os.sep
            strays = sorted(h for h in headers if not os.path.realpath(h).startswith(inside))
            if strays:
                fail(f"the {kind} consumer read dlock headers from outside the install: {strays[:5]}")

        # The CMake consumer finds libdlock through its RUNPATH (CMake writes
        # the imported library's folder there); the Meson one is given the
        # folder, as a user of a library outside the loader's path would.
        run_env = {"cmake": env, "meson": dict(env, LD_LIBRARY_PATH=libdir)}
        shared = [f for f in os.listdir(libdir) if f.startswith("libdlock.so")]
        with private_redis() as (port, _):
            for kind, exe in programs.items():
                if shared:
                    loaded = [line for line in run(["ldd", exe], env=run_env[kind]).splitlines() if "libdlock" in line]
                    if not loaded or (libdir + os.sep) not in loaded[0]:
                        fail(f"the {kind} consumer does not load the installed libdlock: {loaded}")
                print(run([exe, f"redis://127.0.0.1:{port}", version], env=run_env[kind]).strip(),
                      f"(built by {kind})")
    print("check_consumers: ok")


if __name__ == "__main__":
    main()
