#!/usr/bin/env python3
"""dlock as an installed package: installs this build into a temporary
folder (meson install --destdir), then builds tests/consumers/consumer.cpp
against it twice, as a user would:
- a CMake project: find_package(dlock 0.1) and dlock::dlock;
- a Meson project: dependency('dlock') through pkg-config.
Each program runs against a private redis-server, with the installed
libdlock (not the build tree's), and checks that its locks exclude a second
client and that dlock::version() is the project's version.

usage: check_consumers.py MESON BUILD_DIR VERSION CXX
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
    r = subprocess.run(cmd, capture_output=True, text=True, env=env, cwd=cwd, timeout=600)
    if r.returncode != 0:
        fail(f"{' '.join(cmd)} exited {r.returncode}:\n{r.stdout[-3000:]}\n{r.stderr[-3000:]}")
    return r.stdout


def find_one(root, name):
    found = [os.path.join(d, name) for d, _, files in os.walk(root) if name in files]
    if len(found) != 1:
        fail(f"expected one {name} under {root}, found {found}")
    return found[0]


def project(tmp, kind):
    """A copy of the consumer project of this kind, with consumer.cpp."""
    src = os.path.join(tmp, kind + "-src")
    shutil.copytree(os.path.join(HERE, kind), src)
    shutil.copy(os.path.join(HERE, "consumer.cpp"), src)
    return src


def main():
    meson, build_dir, version, cxx = sys.argv[1:5]
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
        # Only the installed copy: no build tree on the loader's path.
        env = dict(os.environ, CXX=cxx, LD_LIBRARY_PATH=libdir)

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

        with private_redis() as (port, _):
            for kind, exe in programs.items():
                shared = os.path.join(libdir, "libdlock.so")
                if os.path.exists(shared) and shared not in run(["ldd", exe], env=env):
                    fail(f"the {kind} consumer does not load the installed libdlock")
                print(run([exe, f"redis://127.0.0.1:{port}", version], env=env).strip(), f"(built by {kind})")
    print("check_consumers: ok")


if __name__ == "__main__":
    main()
