#!/usr/bin/env python3
"""Fetches and unpacks a Debian source package, the newest version that actually downloads.

    scripts/fetch-source.py [options] PACKAGE DEST

Prints the unpacked source directory (DEST/<PACKAGE>-<upstream version>) on stdout and
progress on stderr; exits 1 when no version could be fetched.

Debian's indexes and the files its mirror serves differ: an index can list a version whose
files are gone (a security update the mirror lacks), and a version that still downloads can
be missing from every index. So versions are tried newest first, from the index of the
suites asked for, then (--probe N) by guessing the N upstream patch releases below the
newest listed one with Debian's usual revision suffixes. A version counts only when every
file it needs downloads and matches its checksum.

  --suites bookworm|newer|all   which Debian suites' indexes to read (default bookworm):
                                newer is trixie, trixie-security and sid, read through a
                                private apt state under the cache, never the system's
  --upstream-only               for a PECL extension the upstream tarball is the whole
                                source: take it alone when the .dsc or Debian's tarball
                                does not download
  --probe N                     also try N upstream patch releases below the newest listed
  --max-upstream X.Y            ignore versions of another upstream branch (php8.4 8.5.x)
  --not-above V                 ignore upstream versions above V (an older series, for
                                an extension whose newest needs a newer PHP)

The private apt state (lists, no packages installed) lives in $PHP_WORKER_CACHE/apt
(default ~/.cache/php_worker/apt) and is refreshed when older than a day.
"""

import argparse
import fcntl
import hashlib
import os
import re
import shutil
import subprocess
import sys
import tarfile
import tempfile
import time
import urllib.error
import urllib.request

MIRRORS = ("http://deb.debian.org/debian", "http://deb.debian.org/debian-security")
KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"
SUITES = {
    "bookworm": [("debian", "bookworm"), ("debian", "bookworm-updates"), ("debian-security", "bookworm-security")],
    "newer": [("debian", "trixie"), ("debian-security", "trixie-security"), ("debian", "sid")],
}
SUITES["all"] = SUITES["bookworm"] + SUITES["newer"]


def log(msg):
    print(f"fetch-source: {msg}", file=sys.stderr, flush=True)


def cache_root():
    return os.environ.get("PHP_WORKER_CACHE") or os.path.expanduser("~/.cache/php_worker")


def apt_state(suites):
    """The apt options of a private state that reads only the given suites' Sources."""
    root = os.path.join(cache_root(), "apt", suites)
    lists = os.path.join(root, "lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    os.makedirs(os.path.join(root, "cache", "archives", "partial"), exist_ok=True)
    sources = os.path.join(root, "sources.list")
    lines = [f"deb-src [signed-by={KEYRING}] http://deb.debian.org/{archive} {suite} main\n" for archive, suite in SUITES[suites]]
    with open(sources, "w") as f:
        f.writelines(lines)
    opts = [
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={lists}",
        f"-oDir::Cache={os.path.join(root, 'cache')}",
        "-oDir::State::status=/dev/null",
        "-oAPT::Sandbox::User=root",
    ]
    stamp = os.path.join(root, ".updated")
    if not os.path.exists(stamp) or time.time() - os.path.getmtime(stamp) > 86400:
        log(f"reading the {suites} source indexes")
        subprocess.run(["apt-get", "-qq", *opts, "update"], check=True, stdout=sys.stderr)
        open(stamp, "w").close()
    return opts


def index_records(package, opts):
    """Every (version, directory, {file: sha256}) the indexes list for a source package
    (or for the source package that builds the binary package of that name)."""
    out = subprocess.run(["apt-cache", *opts, "showsrc", package], capture_output=True, text=True).stdout
    records = []
    for block in out.split("\n\n"):
        fields, key = {}, None
        for line in block.splitlines():
            if line.startswith((" ", "\t")) and key:
                fields[key] += "\n" + line.strip()
            elif ":" in line:
                key, _, value = line.partition(":")
                fields[key] = value.strip()
        if "Version" not in fields:
            continue
        files = {}
        for line in fields.get("Checksums-Sha256", "").splitlines():
            parts = line.split()
            if len(parts) == 3:
                files[parts[2]] = parts[0]
        records.append((fields["Package"], fields["Version"], fields.get("Directory", ""), files))
    # A binary package's name finds its source package (php-xdebug is built by xdebug).
    exact = [r for r in records if r[0] == package]
    return [r[1:] for r in (exact or [r for r in records if r[0] == records[0][0]])]


def version_key(v):
    """A sort key close enough to dpkg's order for the versions tried here."""
    v = v.split(":", 1)[-1]
    return [(0, int(p)) if p.isdigit() else (1, p) for p in re.split(r"[.\-+~]", v)] + [(-1, "~" in v)]


def upstream_of(version):
    return version.split(":", 1)[-1].rsplit("-", 1)[0].split("+dfsg")[0].split("+ds")[0]


def download(url, dest, sha256=None):
    try:
        with urllib.request.urlopen(url, timeout=60) as r, open(dest, "wb") as f:
            shutil.copyfileobj(r, f)
    except (urllib.error.URLError, OSError):
        return False
    if sha256:
        with open(dest, "rb") as f:
            if hashlib.sha256(f.read()).hexdigest() != sha256:
                log(f"{os.path.basename(dest)}: checksum mismatch")
                return False
    return True


def fetch_file(directory, name, dest, sha256=None):
    # The security archive names its pool pool/updates/main/...: try each archive with its
    # own form of the directory.
    main = directory.replace("pool/updates/", "pool/", 1)
    security = main.replace("pool/", "pool/updates/", 1)
    return any(download(f"{m}/{d}/{name}", dest, sha256) for m, d in zip(MIRRORS, (main, security)))


def dsc_files(dsc_path):
    """The files a .dsc names, with their sha256."""
    files, in_section = {}, False
    with open(dsc_path, errors="replace") as f:
        for line in f:
            if line.startswith("Checksums-Sha256:"):
                in_section = True
                continue
            if in_section:
                if not line.startswith(" "):
                    break
                parts = line.split()
                if len(parts) == 3:
                    files[parts[2]] = parts[0]
    return files


def try_version(package, source, version, directory, files, dest, upstream_only):
    """Unpacks one version of source (the source package that builds package, named
    after its pool directory) into dest/<package>-<upstream>; returns it or None."""
    plain = version.split(":", 1)[-1]
    dsc = f"{source}_{plain}.dsc"
    work = tempfile.mkdtemp(prefix=f"{package}-", dir=dest)
    try:
        if fetch_file(directory, dsc, os.path.join(work, dsc), files.get(dsc)):
            needed = {n: s for n, s in dsc_files(os.path.join(work, dsc)).items()}
            if all(fetch_file(directory, n, os.path.join(work, n), s) for n, s in needed.items()):
                subprocess.run(
                    ["dpkg-source", "--no-check", "-x", dsc, "src"], cwd=work, check=True,
                    stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
                )
                return finish(work, "src", package, version, dest)
        if not upstream_only:
            return None
        origs = [n for n in files if re.search(r"\.orig\.tar\.[a-z0-9]+$", n)]
        if not origs:
            return None
        orig = origs[0]
        if not fetch_file(directory, orig, os.path.join(work, orig), files[orig]):
            return None
        with tarfile.open(os.path.join(work, orig)) as t:
            t.extractall(os.path.join(work, "x"), filter="data")
        entries = os.listdir(os.path.join(work, "x"))
        top = os.path.join("x", entries[0]) if len(entries) == 1 and os.path.isdir(os.path.join(work, "x", entries[0])) else "x"
        return finish(work, top, package, version, dest)
    except (subprocess.CalledProcessError, tarfile.TarError, OSError) as e:
        log(f"{package} {version}: {e}")
        return None
    finally:
        shutil.rmtree(work, ignore_errors=True)


def finish(work, sub, package, version, dest):
    final = os.path.join(dest, f"{package}-{upstream_of(version)}")  # the name asked for
    shutil.rmtree(final, ignore_errors=True)
    os.rename(os.path.join(work, sub), final)
    with open(os.path.join(final, ".debian-version"), "w") as f:
        f.write(version + "\n")
    return final


def probes(records, count):
    """Versions below the newest listed upstream, as Debian would have named them."""
    if not records or count <= 0:
        return []
    newest = max(records, key=lambda r: version_key(r[0]))
    m = re.match(r"^(\d+)\.(\d+)\.(\d+)$", upstream_of(newest[0]))
    if not m:
        return []
    major, minor, patch = (int(x) for x in m.groups())
    listed = {r[0] for r in records}
    out = []
    for p in range(patch - 1, max(patch - 1 - count, -1), -1):
        for rev in ("-1~deb13u1", "-1", "-2~deb13u1", "-2", "-3"):
            v = f"{major}.{minor}.{p}{rev}"
            if v not in listed:
                out.append((v, newest[1], {}))
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package")
    ap.add_argument("dest")
    ap.add_argument("--suites", choices=sorted(SUITES), default="bookworm")
    ap.add_argument("--upstream-only", action="store_true")
    ap.add_argument("--probe", type=int, default=0)
    ap.add_argument("--max-upstream")
    ap.add_argument("--not-above")
    args = ap.parse_args()

    # One fetch at a time (PHP 8.4 and 8.2 build side by side): apt's lists, and the
    # folders unpacked under the same cache, are shared.
    os.makedirs(cache_root(), exist_ok=True)
    lock = open(os.path.join(cache_root(), ".lock-fetch"), "w")
    fcntl.flock(lock, fcntl.LOCK_EX)
    os.makedirs(args.dest, exist_ok=True)
    existing = [d for d in os.listdir(args.dest) if d.startswith(args.package + "-") and
                os.path.exists(os.path.join(args.dest, d, ".debian-version"))]
    if existing:  # another build fetched it while this one waited
        print(os.path.join(args.dest, sorted(existing)[-1]))
        return
    records = index_records(args.package, apt_state(args.suites))
    if args.max_upstream:
        records = [r for r in records if upstream_of(r[0]).startswith(args.max_upstream + ".")]
    if args.not_above:
        limit = version_key(args.not_above)
        records = [r for r in records if version_key(upstream_of(r[0])) <= limit]
    if not records:
        log(f"no {args.package} source in the {args.suites} indexes")
        sys.exit(1)
    seen, candidates = set(), []
    for r in sorted(records, key=lambda r: version_key(r[0]), reverse=True) + probes(records, args.probe):
        if r[0] not in seen:
            seen.add(r[0])
            candidates.append(r)
    for version, directory, files in candidates:
        got = try_version(args.package, os.path.basename(directory) or args.package, version, directory, files, args.dest, args.upstream_only)
        if got:
            log(f"{args.package} {version}")
            print(got)
            return
        if files:  # a listed version: say it; guesses fail quietly
            log(f"{args.package} {version} is listed but does not download, trying the next")
    log(f"no version of {args.package} could be fetched")
    sys.exit(1)


if __name__ == "__main__":
    main()
