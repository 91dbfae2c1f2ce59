#!/usr/bin/env python3
"""The Dockerfile's runtime stage installs every shared library the binaries load.

    dockerfile_runtime_test.py DOCKERFILE BINARY...

Runs ldd on each (release) binary, maps every library it resolves to its
Debian package with dpkg -S, and checks that package is installed by the
final stage's `apt-get install` list, directly or as a dependency of a listed
package (Depends/Pre-Depends of the installed packages, followed
recursively). Also refuses -dev packages in the runtime stage and listed
packages that are not installed here (a typo would break `docker build`).
Exit 0 = passed, 1 = failed.
"""
import os
import re
import subprocess
import sys


def runtime_packages(dockerfile):
    text = open(dockerfile, encoding="utf-8").read()
    # Join continuation lines, then take the last stage's instructions.
    text = re.sub(r"\\\n", " ", text)
    stages = re.split(r"(?im)^FROM\s", text)
    final = stages[-1]
    packages = []
    for line in final.splitlines():
        if not line.lstrip().upper().startswith("RUN "):
            continue
        for command in re.split(r"&&|;", line):
            words = command.split()
            if "apt-get" in words and "install" in words:
                packages += [w for w in words[words.index("install") + 1:] if not w.startswith("-")]
    return packages


def run(args):
    return subprocess.run(args, capture_output=True, text=True, check=False)


def installed_packages():
    """{package: [dependency alternatives]} of every installed package (one dpkg-query)."""
    result = run(["dpkg-query", "-W", "-f=${Package}\t${Status}\t${Depends}, ${Pre-Depends}\n"])
    packages = {}
    for line in result.stdout.splitlines():
        name, status, depends = (line.split("\t") + ["", ""])[:3]
        if status.endswith(" installed"):
            packages[name] = [
                [choice.strip().split(" ")[0].split(":")[0] for choice in alternative.split("|")]
                for alternative in depends.split(",") if alternative.strip()]
    return packages


def packages_of(paths):
    """{path: package} from one dpkg -S over the paths and their /usr or real forms."""
    candidates = {}
    for path in paths:
        forms = {path, os.path.realpath(path)}
        forms |= {f[4:] if f.startswith("/usr/") else "/usr" + f for f in list(forms)}
        for form in forms:
            candidates.setdefault(form, set()).add(path)
    result = run(["dpkg", "-S", *sorted(candidates)])
    owner = {}
    for line in result.stdout.splitlines():
        # "libzmq5:amd64: /lib/x86_64-linux-gnu/libzmq.so.5"
        package, _, file = line.partition(": ")
        for path in candidates.get(file.strip(), ()):
            owner.setdefault(path, package.split(":")[0].split(",")[0].strip())
    return owner


def depends_closure(packages, installed):
    seen = set()
    todo = list(packages)
    while todo:
        package = todo.pop()
        if package in seen:
            continue
        seen.add(package)
        for alternative in installed.get(package, []):
            chosen = next((name for name in alternative if name in installed), None)
            if chosen:
                todo.append(chosen)
    return seen


def main():
    if len(sys.argv) < 3:
        print(__doc__, file=sys.stderr)
        return 1
    dockerfile, binaries = sys.argv[1], sys.argv[2:]
    failures = []
    listed = runtime_packages(dockerfile)
    installed = installed_packages()
    if not listed:
        failures.append(f"{dockerfile}: no apt-get install in the final stage")
    for package in listed:
        if package.endswith("-dev"):
            failures.append(f"runtime stage installs a -dev package: {package}")
        if package not in installed:
            failures.append(f"runtime package {package} is not a Debian package installed here (typo?)")
    covered = depends_closure(listed, installed)
    libraries = {}  # path -> library names
    for binary in binaries:
        result = run(["ldd", binary])
        if result.returncode != 0:
            failures.append(f"ldd {binary} failed: {result.stderr.strip()}")
            continue
        for line in result.stdout.splitlines():
            match = re.match(r"\s*(\S+) => (\S+) \(", line)
            if match:
                libraries.setdefault(match.group(2), set()).add(match.group(1))
            elif "not found" in line:
                failures.append(f"{binary}: {line.strip()}")
    owner = packages_of(sorted(libraries))
    needed = {}
    for path, names in libraries.items():
        if path not in owner:
            failures.append(f"{', '.join(sorted(names))} ({path}) belongs to no Debian package")
            continue
        needed.setdefault(owner[path], set()).update(names)
    for package, names in sorted(needed.items()):
        if package not in covered:
            failures.append(
                f"{package} (for {', '.join(sorted(names))}) is missing from the runtime "
                f"stage's apt-get install list in {dockerfile}")
    direct = set(listed) - {"ca-certificates"}
    unused = sorted(p for p in direct if p not in needed)
    for failure in failures:
        print(f"FAIL: {failure}")
    print(f"{len(binaries)} binaries load libraries of {len(needed)} packages; the Dockerfile lists "
          f"{len(listed)} (closure {len(covered)})" + (f"; listed but not loaded: {', '.join(unused)}" if unused else ""))
    print(f"{'0' if not failures else len(failures)} failed" if failures else "dockerfile runtime packages: ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
