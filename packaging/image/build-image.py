#!/usr/bin/env python3
"""Builds php_worker's OCI image from the portable binary, without a container daemon.

    packaging/image/build-image.py [--arch amd64|arm64] [--out dist/image-<arch>]
    packaging/image/build-image.py --index dist/image-amd64 dist/image-arm64 [--out dist/image]

Input: dist/php_worker/ (scripts/build-portable.sh; dist/php_worker-arm64/ for arm64, from
scripts/build-arm64.sh) and Debian 12's packages for the
base, fetched with `apt-get download` (cached in ~/.cache/php_worker/image-debs-<arch>/):
libc, libgcc_s, dash (for the entrypoint and `php`), tzdata, the CA certificates, the
MIME types, base-files and netbase. Their files are unpacked as they are, without
maintainer scripts; what those scripts would make (the CA bundle, /bin/sh, the users)
is made here, and /var/lib/dpkg/status names each package and version for scanners.

Each build takes of every package the version apt's candidate is at that moment (apt's
lists are refreshed first when more than a day old), so a rebuild carries Debian's
security updates: the cache only saves downloads, and keeps that version alone. The log
names each package and version and which changed since the last build.

Output: an OCI image layout in --out (`oci:dist/image-amd64:latest` for skopeo, umoci
and podman) and the same as one archive beside it (--out + ".tar"), which `podman load`
and `docker load` take. The output is reproducible: every time, file time and owner in
the layer comes from SOURCE_DATE_EPOCH (default: the last commit's time), so the same
inputs give the same digests.

--index merges one-platform layouts into one multi-arch image: an OCI image index naming
each platform's manifest, tagged `latest`, with every blob. Pushed with `skopeo copy
--all`, a registry serves each machine its own architecture.

What the image holds and how to use it: docs/container-image.md.
"""
import argparse
import functools
import gzip
import hashlib
import io
import json
import os
import stat
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

REPO = Path(__file__).resolve().parents[2]
HERE = Path(__file__).resolve().parent
PACKAGES = ["libc6", "libgcc-s1", "dash", "tzdata", "ca-certificates", "media-types", "base-files", "netbase"]
# What a server never reads: documentation, manuals, translations.
DROPPED = ("usr/share/doc/", "usr/share/man/", "usr/share/info/", "usr/share/locale/", "usr/share/lintian/",
           "usr/share/bug/", "usr/share/bash-completion/")
# The image's user binds 80 and 443 through the network namespace's
# net.ipv4.ip_unprivileged_port_start=0 (Docker's default, the Kubernetes manifest's
# sysctl), not a file capability: no file in the image carries one. A capability with the
# effective bit makes execve fail with EPERM where the bounding set lacks it (`drop: ALL`,
# `--cap-drop=ALL`), and makes every exec of the binary secure-exec (AT_SECURE): glibc
# drops TMPDIR and the like, Go forces GOTRACEBACK=none, and the kernel clears the
# parent-death signal of the `processes N` children. docs/container-image.md#ports-below-1024.
USER, UID, GID = "php_worker", 1000, 1000
GO_ARCH = {"amd64": "amd64", "arm64": "arm64"}
# Packages of architecture "all": one build serves every architecture, and apt names them
# without one.
ARCH_ALL = ("tzdata", "ca-certificates", "media-types", "netbase")
# apt's package lists: when the newest is older than this, the build refreshes them first.
LISTS = Path("/var/lib/apt/lists")
LISTS_MAX_AGE = 24 * 3600
# Fields of a package's control file that its stanza in the image's /var/lib/dpkg/status
# keeps, in dpkg's order. Left out: Installed-Size (the image drops the documentation) and
# the relations (Depends and the like), which name packages the image does not have.
STATUS_FIELDS = ("Package", "Essential", "Protected", "Status", "Priority", "Section", "Maintainer", "Architecture",
                 "Multi-Arch", "Source", "Version", "Provides", "Description", "Homepage")


def log(msg):
    print(f"build-image: {msg}", file=sys.stderr)


class Tree:
    """The image's files, by path, each a TarInfo and its content."""

    def __init__(self, epoch):
        self.epoch = epoch
        self.entries = {}

    def add(self, info, data=None):
        info = self.normalize(info)
        if info.name in ("", "."):
            return
        parent = os.path.dirname(info.name)
        if parent and parent not in self.entries:
            self.dir(parent)
        self.entries[info.name] = (info, data)

    def normalize(self, info):
        info.name = info.name.lstrip("./").rstrip("/") if info.name not in (".", "./") else ""
        info.mtime = min(int(info.mtime), self.epoch)
        info.uname, info.gname = "", ""
        return info

    def dir(self, path, mode=0o755, uid=0, gid=0):
        info = tarfile.TarInfo(path)
        info.type, info.mode, info.uid, info.gid, info.mtime = tarfile.DIRTYPE, mode, uid, gid, self.epoch
        self.add(info)

    def file(self, path, data, mode=0o644, uid=0, gid=0):
        info = tarfile.TarInfo(path)
        info.size, info.mode, info.uid, info.gid, info.mtime = len(data), mode, uid, gid, self.epoch
        self.add(info, data)

    def link(self, path, target):
        info = tarfile.TarInfo(path)
        info.type, info.linkname, info.mode, info.mtime = tarfile.SYMTYPE, target, 0o777, self.epoch
        self.add(info)

    def add_tar(self, tar):
        for info in tar:
            name = info.name.lstrip("./")
            if name.startswith(DROPPED) or info.type in (tarfile.CHRTYPE, tarfile.BLKTYPE, tarfile.FIFOTYPE):
                continue
            data = tar.extractfile(info).read() if info.isreg() else None
            if info.islnk():  # a hard link becomes a copy: the layer stays order-free
                target = self.entries.get(info.linkname.lstrip("./").rstrip("/"))
                if not target:
                    continue
                data = target[1]
                info.type, info.size, info.linkname = tarfile.REGTYPE, len(data), ""
            self.add(info, data)

    def layer(self):
        """The layer as an uncompressed tar: sorted, PAX, numeric owners only."""
        out = io.BytesIO()
        with tarfile.open(fileobj=out, mode="w", format=tarfile.PAX_FORMAT) as tar:
            for name in sorted(self.entries):
                info, data = self.entries[name]
                tar.addfile(info, io.BytesIO(data) if data is not None else None)
        return out.getvalue()


def cache_root():
    return Path(os.environ.get("PHP_WORKER_CACHE", Path.home() / ".cache" / "php_worker"))


def apt_name(package, arch):
    return package if package in ARCH_ALL else f"{package}:{arch}"


class Apt:
    """What the build asks the machine's apt (the tests put a fake in its place)."""

    env = {**os.environ, "LC_ALL": "C"}

    def candidate(self, name):
        """The version `apt-get install` would take now, or None."""
        out = subprocess.run(["apt-cache", "policy", name], capture_output=True, text=True, env=self.env).stdout
        for line in out.splitlines():
            key, _, value = line.strip().partition(": ")
            if key == "Candidate":
                return None if value == "(none)" else value
        return None

    def sha256(self, name, version):
        """The SHA-256 apt's lists give that version's .deb, or None."""
        out = subprocess.run(["apt-cache", "show", f"{name}={version}"], capture_output=True, text=True,
                             env=self.env).stdout
        for line in out.splitlines():
            if line.startswith("SHA256: "):
                return line.split()[1]
        return None

    def download(self, name, version, into):
        subprocess.run(["apt-get", "download", "-q", "-o", "APT::Sandbox::User=root", f"{name}={version}"],
                       cwd=into, check=True, stdout=subprocess.DEVNULL, env=self.env)

    def lists_time(self):
        """When apt's lists last changed: the newest Release file's time, or None."""
        times = [p.stat().st_mtime for p in LISTS.glob("*Release")] if LISTS.is_dir() else []
        return max(times, default=None)

    def update(self):
        """apt-get update, as scripts/install-deps.sh runs it (through sudo when not root)."""
        cmd = ["apt-get", "update", "-qq"]
        if os.geteuid() != 0:
            cmd = ["sudo", "-n", *cmd]
        try:
            return subprocess.run(cmd, env=self.env).returncode == 0
        except FileNotFoundError:
            return False

    def foreign(self, arch):
        """Whether apt downloads packages of this architecture (dpkg's native or foreign ones)."""
        native = subprocess.run(["dpkg", "--print-architecture"], capture_output=True, text=True).stdout.split()
        foreign = subprocess.run(["dpkg", "--print-foreign-architectures"], capture_output=True, text=True).stdout.split()
        return arch in native + foreign


class Deb:
    """One .deb: its path and its control file's fields (dpkg-deb -f), in their order."""

    def __init__(self, path):
        self.path = Path(path)
        text = subprocess.run(["dpkg-deb", "-f", str(path)], capture_output=True, text=True, check=True).stdout
        self.fields = parse_control(text)
        self.package, self.version = self.fields["Package"], self.fields["Version"]
        self.arch = self.fields["Architecture"]

    def sha256(self):
        return hashlib.sha256(self.path.read_bytes()).hexdigest()


def parse_control(text):
    """A control stanza's fields, each with its continuation lines, in order."""
    fields, key = {}, None
    for line in text.splitlines():
        if line[:1] in (" ", "\t") and key:
            fields[key] += "\n" + line
        elif ":" in line:
            key, _, value = line.partition(":")
            fields[key] = value.strip()
    return fields


def compare_versions(a, b):
    """Debian's order of two versions (dpkg --compare-versions): -1, 0 or 1."""
    if a == b:
        return 0
    lt = subprocess.run(["dpkg", "--compare-versions", a, "lt", b]).returncode == 0
    return -1 if lt else 1


def fresh_lists(apt, cache):
    """Refreshes apt's lists when they are more than a day old, or says why it did not.
    Their age is that of the newest Release file, or of this build's last refresh: an
    update that finds nothing new leaves the files as they were."""
    stamp = cache / "apt-lists-refreshed"
    times = [t for t in (apt.lists_time(), stamp.stat().st_mtime if stamp.exists() else None) if t is not None]
    age = time.time() - max(times) if times else None
    if age is not None and age < LISTS_MAX_AGE:
        log(f"apt's package lists: {age / 3600:.1f} h old")
        return
    log(f"apt's package lists: {'none' if age is None else f'{age / 86400:.1f} days old'}: apt-get update")
    if apt.update():
        stamp.touch()
        return
    log("WARNING: apt-get update failed (offline, or not root and sudo asks a password): the image takes the "
        "versions apt's lists named " + ("never" if age is None else f"{age / 86400:.1f} days ago") +
        ", without the security fixes published since; run `sudo apt-get update` and build again")


def fetch_packages(arch, apt=None, cache=None):
    """The base packages' .debs, each the version apt's candidate is now: taken from the
    cache when it holds that file, with the checksum apt's lists give, else downloaded.
    The cache keeps only that version of each package. Logs each package and version,
    and which changed since the last build (record_build)."""
    apt = apt or Apt()
    cache = Path(cache or cache_root() / f"image-debs-{arch}")
    cache.mkdir(parents=True, exist_ok=True)
    fresh_lists(apt, cache.parent)
    last = read_record(cache)
    cached = {}
    for path in sorted(cache.glob("*.deb")):
        try:
            deb = Deb(path)
        except subprocess.CalledProcessError:
            log(f"dropped {path.name} from the cache: not a readable .deb")
            path.unlink()
            continue
        cached.setdefault(deb.package, []).append(deb)
    debs = []
    log(f"base packages ({arch}), the versions apt takes now"
        + ("" if last else f" (no record of an earlier build in {cache})") + ":")
    for p in PACKAGES:
        name = apt_name(p, arch)
        version = apt.candidate(name)
        if not version:
            hint = ("" if p in ARCH_ALL or apt.foreign(arch) else
                    f": {arch} is not among dpkg's architectures (scripts/install-deps.sh --{arch} adds it)")
            sys.exit(f"build-image: apt has no candidate version of {name}{hint}")
        want_sha = apt.sha256(name, version)
        chosen, how = None, "cached"
        for deb in cached.get(p, []):
            if deb.version == version and deb.arch in (arch, "all") and not chosen:
                if want_sha and deb.sha256() != want_sha:
                    log(f"  {deb.path.name}: not the file apt's lists name (SHA-256 differs): fetched again")
                    continue
                chosen = deb
        if not chosen:
            chosen, how = download(apt, cache, p, name, version, want_sha), "downloaded"
        others = [d for d in cached.get(p, []) if d.path != chosen.path]
        previous = last.get(p)
        if previous is None and cached.get(p):  # a cache from before the record: its newest version
            previous = max((d.version for d in cached[p]), key=functools.cmp_to_key(compare_versions))
        if previous is None or previous == version:
            change = ""
        elif compare_versions(version, previous) > 0:
            change = f"; UPDATED since the last build, which had {previous}"
        else:
            change = f"; OLDER than the last build's {previous} (apt's candidate went back)"
        log(f"  {p} {version} ({chosen.arch}): {how}{change}")
        for d in others:
            if d.path.exists():
                d.path.unlink()
            log(f"    dropped {d.path.name} from the cache: not apt's candidate")
        debs.append(chosen)
    return debs


def download(apt, cache, package, name, version, want_sha):
    with tempfile.TemporaryDirectory(dir=cache, prefix=".download-") as tmp:
        try:
            apt.download(name, version, tmp)
        except subprocess.CalledProcessError:
            sys.exit(f"build-image: apt-get download {name}={version} failed (is that version still in the archive?)")
        got = [Deb(p) for p in Path(tmp).glob("*.deb")]
        if len(got) != 1 or (got[0].package, got[0].version) != (package, version):
            sys.exit(f"build-image: apt-get download {name}={version} gave "
                     + (", ".join(f"{d.package} {d.version}" for d in got) or "nothing"))
        if want_sha and got[0].sha256() != want_sha:
            sys.exit(f"build-image: the downloaded {got[0].path.name} is not the file apt's lists name (SHA-256)")
        path = cache / got[0].path.name
        os.replace(got[0].path, path)
    return Deb(path)


def read_record(cache):
    """The versions the last build with this cache took: {package: version}."""
    try:
        return json.loads((cache / "last-build.json").read_text())
    except (OSError, ValueError):
        return {}


def record_build(cache, debs):
    (cache / "last-build.json").write_text(json.dumps({d.package: d.version for d in debs}, indent=1, sort_keys=True))


def dpkg_status(debs):
    """/var/lib/dpkg/status for the base packages, so that image scanners find their
    versions: one stanza each, sorted by name, its fields from the package's control file."""
    stanzas = []
    for deb in sorted(debs, key=lambda d: d.package):
        fields = {**deb.fields, "Status": "install ok installed"}
        stanzas.append("".join(f"{k}: {fields[k]}\n" for k in STATUS_FIELDS if k in fields))
    return "\n".join(stanzas).encode()


def base_files(tree, debs):
    for deb in debs:
        fsys = subprocess.run(["dpkg-deb", "--fsys-tarfile", str(deb.path)], capture_output=True, check=True).stdout
        with tarfile.open(fileobj=io.BytesIO(fsys)) as tar:
            tree.add_tar(tar)
    # What the maintainer scripts would have made.
    tree.link("bin/sh", "dash")
    certs = sorted(p for p in tree.entries if p.startswith("usr/share/ca-certificates/") and p.endswith(".crt"))
    bundle = b"".join(tree.entries[p][1] for p in certs)
    tree.dir("etc/ssl/certs")
    tree.file("etc/ssl/certs/ca-certificates.crt", bundle)
    tree.link("etc/localtime", "/usr/share/zoneinfo/Etc/UTC")
    tree.file("etc/timezone", b"Etc/UTC\n")
    tree.file("etc/nsswitch.conf", b"passwd: files\ngroup: files\nhosts: files dns\nnetworks: files\n"
              b"protocols: files\nservices: files\n")
    # Runtimes mount their own over it; one that does not still finds localhost, where
    # Caddy's admin API listens.
    tree.file("etc/hosts", b"127.0.0.1\tlocalhost\n::1\t\tlocalhost ip6-localhost ip6-loopback\n")
    tree.file("etc/passwd", f"root:x:0:0:root:/root:/bin/sh\n{USER}:x:{UID}:{GID}:php_worker:/data:/usr/sbin/nologin\n"
              .encode())
    tree.file("etc/group", f"root:x:0:\n{USER}:x:{GID}:\n".encode())
    tree.dir("root", 0o700)
    tree.dir("tmp", 0o1777)
    # No dpkg runs in the image; the file is for scanners (trivy, grype, syft...), which
    # read the packages and versions an image has there.
    tree.file("var/lib/dpkg/status", dpkg_status(debs))
    return len(certs)


def server_files(tree, dist, epoch):
    binary = (dist / "bin" / "caddy").read_bytes()
    tree.file("usr/local/bin/php_worker", binary, 0o755)
    # Invoked as php, the binary is PHP's command line (PHP_BINARY names the link).
    for name in ("caddy", "frankenphp", "php"):
        tree.link(f"usr/local/bin/{name}", "php_worker")
    for so in sorted((dist / "lib" / "php_worker").glob("*.so")):
        tree.file(f"usr/local/lib/php_worker/{so.name}", so.read_bytes())
    tree.file("usr/local/bin/php-worker-entrypoint", (HERE / "php-worker-entrypoint").read_bytes(), 0o755)
    tree.dir("etc/caddy")
    tree.file("etc/caddy/Caddyfile", (HERE / "Caddyfile").read_bytes())
    tree.dir("etc/php_worker/conf.d")
    tree.file("etc/php_worker/php.ini", php_ini_production())
    tree.dir("app/public", uid=UID, gid=GID)
    tree.file("app/public/index.php", (REPO / "packaging" / "files" / "index.php").read_bytes(), uid=UID, gid=GID)
    for d in ("config", "data"):
        tree.dir(d, 0o755, UID, GID)


def php_ini_production():
    """PHP's php.ini-production, from the build the binary links (as the .deb ships)."""
    env = {k: v for k, v in os.environ.items() if k != "PHP_CONFIG"}
    php_config = subprocess.run([str(REPO / "scripts" / "build-php.sh")], capture_output=True, text=True, check=True,
                                env=env).stdout.strip()
    prefix = subprocess.run([php_config, "--prefix"], capture_output=True, text=True, check=True).stdout.strip()
    return (Path(prefix) / "lib" / "php" / "php.ini-production").read_bytes()


def blob(layout, data, media_type):
    digest = hashlib.sha256(data).hexdigest()
    (layout / "blobs" / "sha256").mkdir(parents=True, exist_ok=True)
    (layout / "blobs" / "sha256" / digest).write_bytes(data)
    return {"mediaType": media_type, "digest": f"sha256:{digest}", "size": len(data)}


def canonical(obj):
    return json.dumps(obj, sort_keys=True, separators=(",", ":")).encode()


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--arch", default="amd64", choices=sorted(GO_ARCH))
    ap.add_argument("--dist", help="the portable binary's folder (default: dist/php_worker, or "
                    "dist/php_worker-<arch> for another architecture)")
    ap.add_argument("--out", help="the OCI layout to write (default: dist/image-<arch>, or dist/image for --index)")
    ap.add_argument("--index", nargs="+", metavar="LAYOUT", help="merge these layouts into a multi-arch one")
    args = ap.parse_args()
    if args.index:
        merge(args.index, Path(args.out or REPO / "dist" / "image"))
        return
    default_dist = "php_worker" if args.arch == "amd64" else f"php_worker-{args.arch}"
    dist = Path(args.dist or REPO / "dist" / default_dist)
    out = Path(args.out or REPO / "dist" / f"image-{args.arch}")
    if not (dist / "bin" / "caddy").exists():
        sys.exit(f"build-image: no {dist}/bin/caddy: run scripts/build-portable.sh first")
    epoch = int(os.environ.get("SOURCE_DATE_EPOCH") or subprocess.run(
        ["git", "-C", str(REPO), "log", "-1", "--format=%ct"], capture_output=True, text=True, check=True).stdout)
    version = (REPO / "VERSION").read_text().strip()
    revision = subprocess.run(["git", "-C", str(REPO), "rev-parse", "HEAD"], capture_output=True, text=True).stdout.strip()

    cache = cache_root() / f"image-debs-{args.arch}"
    debs = fetch_packages(args.arch, cache=cache)
    tree = Tree(epoch)
    certs = base_files(tree, debs)
    server_files(tree, dist, epoch)
    layer = tree.layer()
    log(f"{len(tree.entries)} files, {len(layer) >> 20} MiB; {certs} CA certificates; "
        + ", ".join(f"{d.package} {d.version}" for d in debs))

    gz = io.BytesIO()
    with gzip.GzipFile(fileobj=gz, mode="wb", compresslevel=6, mtime=0) as z:
        z.write(layer)
    created = subprocess.run(["date", "-u", "-d", f"@{epoch}", "+%Y-%m-%dT%H:%M:%SZ"], capture_output=True,
                             text=True, check=True).stdout.strip()
    health = "php -r 'exit(@file_get_contents(\"http://127.0.0.1:2019/php_worker/ready\") === false ? 1 : 0);'"
    config = {
        "created": created,
        "architecture": GO_ARCH[args.arch],
        "os": "linux",
        "config": {
            "User": f"{UID}:{GID}",
            "Env": ["PATH=/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin",
                    "XDG_CONFIG_HOME=/config", "XDG_DATA_HOME=/data", "CADDYFILE=/etc/caddy/Caddyfile",
                    "SERVER_NAME=:80"],
            "Entrypoint": ["/usr/local/bin/php-worker-entrypoint"],
            "Cmd": ["php_worker", "run"],
            "WorkingDir": "/app",
            "ExposedPorts": {"80/tcp": {}, "443/tcp": {}, "443/udp": {}},
            "Volumes": {"/config": {}, "/data": {}},
            "StopSignal": "SIGTERM",
            # Docker's field (OCI runtimes leave it): podman and docker run it when the
            # image is converted to their format, as `podman build --format docker` does.
            "Healthcheck": {"Test": ["CMD-SHELL", health], "Interval": 10_000_000_000, "Timeout": 3_000_000_000,
                            "StartPeriod": 30_000_000_000, "Retries": 3},
            "Labels": {
                "org.opencontainers.image.title": "php_worker",
                "org.opencontainers.image.description": "A PHP application server for Caddy: classic and worker mode",
                "org.opencontainers.image.version": version,
                "org.opencontainers.image.revision": revision,
                "org.opencontainers.image.created": created,
                "org.opencontainers.image.licenses": "Apache-2.0",
                "org.opencontainers.image.base.name": "debian:bookworm (packages: " + " ".join(
                    f"{d.package}={d.version}" for d in debs) + ")",
            },
        },
        "rootfs": {"type": "layers", "diff_ids": ["sha256:" + hashlib.sha256(layer).hexdigest()]},
        "history": [{"created": created, "created_by": "packaging/image/build-image.py"}],
    }

    fresh_layout(out)
    layer_desc = blob(out, gz.getvalue(), "application/vnd.oci.image.layer.v1.tar+gzip")
    config_desc = blob(out, canonical(config), "application/vnd.oci.image.config.v1+json")
    manifest = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.manifest.v1+json",
                "config": config_desc, "layers": [layer_desc],
                "annotations": {"org.opencontainers.image.created": created}}
    manifest_desc = blob(out, canonical(manifest), "application/vnd.oci.image.manifest.v1+json")
    manifest_desc["platform"] = {"architecture": GO_ARCH[args.arch], "os": "linux"}
    manifest_desc["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (out / "index.json").write_bytes(canonical({"schemaVersion": 2, "manifests": [manifest_desc]}))
    archive = archive_layout(out, epoch)
    record_build(cache, debs)
    log(f"{out} (oci:{out}:latest) and {archive}: {manifest_desc['digest']}, "
        f"layer {layer_desc['size'] >> 20} MiB compressed")
    print(manifest_desc["digest"])


def fresh_layout(out):
    if out.exists():
        subprocess.run(["rm", "-rf", str(out)], check=True)
    (out / "blobs" / "sha256").mkdir(parents=True)
    (out / "oci-layout").write_bytes(canonical({"imageLayoutVersion": "1.0.0"}))


def archive_layout(out, epoch):
    """The same layout as one archive beside it, its members in order and with the epoch's time."""
    archive = out.with_name(out.name + ".tar")
    with tarfile.open(archive, "w", format=tarfile.PAX_FORMAT) as tar:
        for path in sorted(out.rglob("*")):
            info = tar.gettarinfo(str(path), str(path.relative_to(out)))
            info.mtime, info.uid, info.gid, info.uname, info.gname = epoch, 0, 0, "", ""
            info.mode = 0o755 if path.is_dir() else 0o644
            with open(path, "rb") if path.is_file() else open(os.devnull, "rb") as f:
                tar.addfile(info, f if path.is_file() else None)
    return archive


def merge(layouts, out):
    """One multi-arch layout from one-platform ones: their blobs, and an image index (a blob
    itself) naming each platform's manifest, which index.json tags `latest`."""
    fresh_layout(out)
    manifests, epoch = [], 0
    for layout in map(Path, layouts):
        (desc,) = json.loads((layout / "index.json").read_text())["manifests"]
        if any(m["platform"] == desc["platform"] for m in manifests):
            sys.exit(f"build-image: two layouts for {desc['platform']}")
        for b in sorted((layout / "blobs" / "sha256").iterdir()):
            (out / "blobs" / "sha256" / b.name).write_bytes(b.read_bytes())
        manifest = json.loads((layout / "blobs" / "sha256" / desc["digest"].split(":")[1]).read_text())
        created = manifest.get("annotations", {}).get("org.opencontainers.image.created", "1970-01-01T00:00:00Z")
        epoch = max(epoch, int(subprocess.run(["date", "-u", "-d", created, "+%s"], capture_output=True, text=True,
                                              check=True).stdout))
        manifests.append({k: desc[k] for k in ("mediaType", "digest", "size", "platform")})
    manifests.sort(key=lambda m: (m["platform"]["os"], m["platform"]["architecture"]))
    index = {"schemaVersion": 2, "mediaType": "application/vnd.oci.image.index.v1+json", "manifests": manifests}
    index_desc = blob(out, canonical(index), "application/vnd.oci.image.index.v1+json")
    index_desc["annotations"] = {"org.opencontainers.image.ref.name": "latest"}
    (out / "index.json").write_bytes(canonical({"schemaVersion": 2, "manifests": [index_desc]}))
    archive = archive_layout(out, epoch)
    log(f"{out} (oci:{out}:latest) and {archive}: an index of "
        + ", ".join(f"{m['platform']['os']}/{m['platform']['architecture']}" for m in manifests))
    print(index_desc["digest"])


if __name__ == "__main__":
    main()
