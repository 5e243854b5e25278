#!/usr/bin/env python3
"""Unpacks a PHP application or library packaged by a newer Debian, with the PHP libraries
it depends on, into a test root, without installing anything.

    scripts/fetch-php-app.py [--suite bookworm|trixie|sid] [--also PACKAGE]... PACKAGE

Prints the root's PHP include folder (<root>/usr/share/php) on stdout, progress on stderr.

Debian 13 (trixie) and sid package current PHP frameworks (php-laravel-framework 10 and
13, Symfony 6.4 and 7.4, WordPress) as architecture-independent code; Debian 12
(bookworm) packages WordPress 6.1, which the benchmark runs (with --also, its default
theme, which WordPress only recommends). This reads their
binary package index through a private apt state (never the system's), follows the
package's dependencies among architecture-independent php-* packages (PHP's own
extensions, php8.x-*, are the server's business and are skipped), downloads them with
`apt-get download` and unpacks each with `dpkg-deb -x`. The root is cached as
$PHP_WORKER_CACHE/apps/<package>-<version>[+<also>...]-<suite>/ (default ~/.cache/php_worker).
"""

import argparse
import os
import re
import shutil
import subprocess
import sys
import tempfile
import time

KEYRING = "/usr/share/keyrings/debian-archive-keyring.gpg"


def log(msg):
    print(f"fetch-php-app: {msg}", file=sys.stderr, flush=True)


def cache_root():
    return os.environ.get("PHP_WORKER_CACHE") or os.path.expanduser("~/.cache/php_worker")


def apt_state(suite):
    root = os.path.join(cache_root(), "apt", f"binary-{suite}")
    lists = os.path.join(root, "lists")
    os.makedirs(os.path.join(lists, "partial"), exist_ok=True)
    os.makedirs(os.path.join(root, "cache", "archives", "partial"), exist_ok=True)
    sources = os.path.join(root, "sources.list")
    with open(sources, "w") as f:
        f.write(f"deb [arch=amd64 signed-by={KEYRING}] http://deb.debian.org/debian {suite} main\n")
    opts = [
        f"-oDir::Etc::SourceList={sources}",
        "-oDir::Etc::SourceParts=/dev/null",
        f"-oDir::State::Lists={lists}",
        f"-oDir::Cache={os.path.join(root, 'cache')}",
        "-oDir::State::status=/dev/null",
        "-oAPT::Architecture=amd64",
        "-oAPT::Sandbox::User=root",
    ]
    stamp = os.path.join(root, ".updated")
    if not os.path.exists(stamp) or time.time() - os.path.getmtime(stamp) > 86400:
        log(f"reading the {suite} package index")
        subprocess.run(["apt-get", "-qq", *opts, "update"], check=True, stdout=sys.stderr)
        open(stamp, "w").close()
    return opts


def load_index(suite):
    """{package: fields} of the suite's binary package index (one version per package)."""
    lists = os.path.join(cache_root(), "apt", f"binary-{suite}", "lists")
    index = {}
    for name in os.listdir(lists):
        if "_Packages" not in name:
            continue
        text = subprocess.run(["/usr/lib/apt/apt-helper", "cat-file", os.path.join(lists, name)],
                              capture_output=True, text=True, check=True).stdout
        for block in text.split("\n\n"):
            fields, key = {}, None
            for line in block.splitlines():
                if line.startswith(" ") and key:
                    continue  # only single-line fields are needed
                key, _, value = line.partition(":")
                if key in ("Package", "Version", "Architecture", "Depends", "Pre-Depends"):
                    fields[key] = value.strip()
            if "Package" in fields:
                index[fields["Package"]] = fields
    return index


def closure(index, package):
    """Every architecture-independent php-* package package needs, itself included."""
    seen, todo, out = set(), [package], []
    while todo:
        name = todo.pop()
        if name in seen:
            continue
        seen.add(name)
        fields = index.get(name)
        if fields is None:
            log(f"{name} is not in the index; skipped")
            continue
        if fields.get("Architecture") != "all" or name == "php-common":
            continue  # an extension (php8.x-*) or PHP itself: the server provides those
        out.append((name, fields["Version"]))
        for dep in re.split(r",\s*", fields.get("Depends", "") + ", " + fields.get("Pre-Depends", "")):
            alternatives = [a.strip().split()[0] for a in dep.split("|") if a.strip()]
            # The first php-* alternative that exists, as apt would choose.
            for alt in alternatives:
                if alt.startswith("php-") and alt in index:
                    todo.append(alt)
                    break
    return out


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("package")
    ap.add_argument("--suite", default="trixie", choices=["bookworm", "trixie", "sid"])
    ap.add_argument("--also", action="append", default=[], metavar="PACKAGE",
                    help="unpack this package (and the PHP libraries it needs) into the same root too")
    args = ap.parse_args()

    opts = apt_state(args.suite)
    index = load_index(args.suite)
    top = index.get(args.package)
    if top is None:
        log(f"{args.package} is not in {args.suite}")
        sys.exit(1)
    also = "".join(f"+{name}" for name in args.also)
    root = os.path.join(cache_root(), "apps", f"{args.package}-{top['Version']}{also}-{args.suite}")
    include = os.path.join(root, "usr", "share", "php")
    if os.path.exists(os.path.join(root, ".complete")):
        print(include)
        return
    packages = closure(index, args.package)
    for name in args.also:
        if name not in index:
            log(f"{name} is not in {args.suite}")
            sys.exit(1)
        packages += [p for p in closure(index, name) if p not in packages]
    log(f"{args.package} {top['Version']} and {len(packages) - 1} PHP libraries from {args.suite}")
    shutil.rmtree(root, ignore_errors=True)
    os.makedirs(root)
    with tempfile.TemporaryDirectory() as tmp:
        wanted = [f"{name}={version}" for name, version in packages]
        subprocess.run(["apt-get", "-qq", *opts, "download", *wanted], cwd=tmp, check=True, stdout=sys.stderr)
        for deb in sorted(os.listdir(tmp)):
            subprocess.run(["dpkg-deb", "-x", os.path.join(tmp, deb), root], check=True)
    # Debian's autoloaders require their dependencies' by absolute path: make them the
    # root's, or they would load the system's versions of the same libraries.
    include_quoted = f"'{include}/"
    for folder, _, files in os.walk(include):
        for name in files:
            path = os.path.join(folder, name)
            if name.endswith(".php") and not os.path.islink(path):
                with open(path, encoding="utf-8", errors="surrogateescape") as f:
                    text = f.read()
                if "'/usr/share/php/" in text:
                    with open(path, "w", encoding="utf-8", errors="surrogateescape") as f:
                        f.write(text.replace("'/usr/share/php/", include_quoted))
    # Debian's php-laravel-framework (11 and later) ships the framework's default config in
    # Illuminate/config, but Laravel merges it from four folders above its bootstrap code.
    laravel_config = os.path.join(include, "Illuminate", "config")
    if os.path.isdir(laravel_config):
        os.symlink(os.path.relpath(laravel_config, os.path.join(root, "usr", "share")), os.path.join(root, "usr", "share", "config"))
    with open(os.path.join(root, "packages.txt"), "w") as f:
        f.writelines(f"{name} {version}\n" for name, version in sorted(packages))
    open(os.path.join(root, ".complete"), "w").close()
    print(include)


if __name__ == "__main__":
    main()
