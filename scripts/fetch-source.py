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

What it found is kept beside the source, in DEST/<PACKAGE>-<upstream>/.fetch-report.json:
the day it read the indexes, every version they list (after the filters above), the one
taken, and the listed ones that did not download. scripts/php-currency.py reads it to say
whether a PHP build is the newest release of its branch.
"""

import argparse
import datetime
import fcntl
import hashlib
import json
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


def apt_state(suites, soft=False):
    """The apt options of a private state that reads only the given suites' Sources.
    soft: a refresh that fails (no network) leaves the lists as they were, with a line on
    stderr, instead of failing; the next call tries again."""
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
        timeout = ["-oAcquire::http::Timeout=10", "-oAcquire::Retries=0"] if soft else []
        done = subprocess.run(["apt-get", "-qq", *opts, *timeout, "update"], check=not soft, stdout=sys.stderr)
        if done.returncode != 0:
            when = time.strftime("%Y-%m-%d", time.gmtime(os.path.getmtime(stamp))) if os.path.exists(stamp) else "never"
            log(f"could not refresh the {suites} source indexes; using those last read ({when})")
            return opts
        open(stamp, "w").close()
    return opts


def indexes_read_on(suites):
    """The day (YYYY-MM-DD, UTC) the private apt state last read the suites' indexes, or None."""
    stamp = os.path.join(cache_root(), "apt", suites, ".updated")
    if not os.path.exists(stamp):
        return None
    return time.strftime("%Y-%m-%d", time.gmtime(os.path.getmtime(stamp)))


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


def upstream_key(version):
    """The sort key of an upstream version ("8.4.27")."""
    return version_key(upstream_of(version))


def choose(candidates, attempt, package=""):
    """Tries candidates, (version, directory, {file: sha256}) newest first, with
    attempt(candidate), which returns the unpacked directory or None. Returns (directory,
    version, unfetched): the first that downloads (None, None when none does), and the
    listed versions tried before it that did not download (a guessed version, with no
    files, is no news: it fails quietly)."""
    unfetched = []
    for candidate in candidates:
        got = attempt(candidate)
        if got:
            return got, candidate[0], unfetched
        if candidate[2]:
            log(f"{package} {candidate[0]} is listed but does not download, trying the next")
            unfetched.append(candidate[0])
    return None, None, unfetched


def newer_upstreams(versions, than):
    """The upstream versions among Debian versions that are above the upstream version
    than ("8.4.24"), once each, oldest first."""
    return sorted({upstream_of(v) for v in versions if upstream_key(v) > version_key(than)}, key=version_key)


REPORT = ".fetch-report.json"


def write_report(directory, report):
    """Keeps report in directory/.fetch-report.json (replaced whole: readers never see half)."""
    tmp = os.path.join(directory, REPORT + ".tmp")
    with open(tmp, "w") as f:
        json.dump(report, f, indent=1, sort_keys=True)
        f.write("\n")
    os.replace(tmp, os.path.join(directory, REPORT))


def read_report(directory):
    """The report kept beside an unpacked source, or {} when there is none."""
    try:
        with open(os.path.join(directory, REPORT)) as f:
            return json.load(f)
    except (OSError, ValueError):
        return {}


def fetch(package, records, dest, upstream_only=False, probe=0, suites=""):
    """Unpacks the newest version of package that downloads, from the index records
    (version, directory, files) and (probe N) guesses below them, into dest; keeps the
    report beside it. Returns the directory, or None."""
    seen, candidates = set(), []
    for r in sorted(records, key=lambda r: version_key(r[0]), reverse=True) + probes(records, probe):
        if r[0] not in seen:
            seen.add(r[0])
            candidates.append(r)

    def attempt(candidate):
        version, directory, files = candidate
        return try_version(package, os.path.basename(directory) or package, version, directory, files, dest, upstream_only)

    got, version, unfetched = choose(candidates, attempt, package)
    if not got:
        return None
    log(f"{package} {version}")
    newer = newer_upstreams(unfetched, upstream_of(version))
    if newer:
        log(f"{package}: took {upstream_of(version)}; the indexes list {', '.join(newer)}, which did not download")
    write_report(got, {
        "package": package, "suites": suites, "taken": version,
        "checked": indexes_read_on(suites) or datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d"),
        "listed": sorted((r[0] for r in records), key=version_key, reverse=True),
        "unfetched": unfetched,
    })
    return got


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
    got = fetch(args.package, records, args.dest, args.upstream_only, args.probe, args.suites)
    if got:
        print(got)
        return
    log(f"no version of {args.package} could be fetched")
    sys.exit(1)


if __name__ == "__main__":
    main()
