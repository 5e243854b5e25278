"""How packaging/image/build-image.py picks the image's Debian packages, without the network:
the version apt's candidate is now, from a fake cache and a fake apt (the .debs are real,
tiny ones made with dpkg-deb), what its log says, when it refreshes apt's lists, and the
/var/lib/dpkg/status it writes for scanners.

    python3 -m unittest discover -s tests/scripts -v      (or python3 -m pytest tests/scripts)
"""

import contextlib
import hashlib
import importlib.util
import io
import json
import shutil
import subprocess
import tempfile
import time
import unittest
from pathlib import Path
from unittest import mock

IMAGE = Path(__file__).resolve().parents[2] / "packaging" / "image"
spec = importlib.util.spec_from_file_location("build_image", IMAGE / "build-image.py")
bi = importlib.util.module_from_spec(spec)
spec.loader.exec_module(bi)


def make_deb(into, package, version, arch="amd64", **fields):
    """A .deb named as apt-get download names it, with one file and this control file."""
    root = Path(tempfile.mkdtemp(dir=into))
    (root / "DEBIAN").mkdir()
    (root / "usr" / "share" / package).mkdir(parents=True)
    (root / "usr" / "share" / package / "version").write_text(version + "\n")
    control = {"Package": package, "Version": version, "Architecture": arch, "Maintainer": "Someone <a@b.example>",
               "Depends": "libc6 (>= 2.34)", "Installed-Size": "12", **fields,
               "Description": f"the {package} package\n A longer text.\n .\n Its second paragraph."}
    (root / "DEBIAN" / "control").write_text("".join(f"{k}: {v}\n" for k, v in control.items()))
    deb = Path(into) / f"{package}_{version.replace(':', '%3a')}_{arch}.deb"
    subprocess.run(["dpkg-deb", "--root-owner-group", "-Zgzip", "--build", str(root), str(deb)], check=True,
                   capture_output=True)
    shutil.rmtree(root)
    return deb


class FakeApt:
    """apt as the build asks it: candidates and checksums from dicts, downloads from a
    folder of .debs (the archive), lists of a given age."""

    def __init__(self, archive, candidates, lists_age=3600, update_ok=True, foreign=True):
        self.archive, self.candidates = Path(archive), candidates
        self.lists_age, self.update_ok, self.is_foreign = lists_age, update_ok, foreign
        self.downloads, self.updates = [], 0

    def _file(self, name, version):
        package = name.split(":")[0]
        found = [p for p in self.archive.glob(f"{package}_*.deb") if bi.Deb(p).version == version]
        return found[0] if found else None

    def candidate(self, name):
        return self.candidates.get(name)

    def sha256(self, name, version):
        f = self._file(name, version)
        return hashlib.sha256(f.read_bytes()).hexdigest() if f else None

    def download(self, name, version, into):
        self.downloads.append(f"{name}={version}")
        f = self._file(name, version)
        if not f:
            raise subprocess.CalledProcessError(100, ["apt-get", "download"])
        shutil.copy(f, into)

    def lists_time(self):
        return None if self.lists_age is None else time.time() - self.lists_age

    def update(self):
        self.updates += 1
        return self.update_ok

    def foreign(self, arch):
        return self.is_foreign


def run(fn, *args, **kw):
    """fn's result and what it logged."""
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = fn(*args, **kw)
    return result, err.getvalue()


class Base(unittest.TestCase):
    def setUp(self):
        self.tmp = Path(tempfile.mkdtemp(prefix="build-image-test."))
        self.addCleanup(shutil.rmtree, self.tmp)
        self.cache = self.tmp / "cache" / "image-debs-amd64"
        self.cache.mkdir(parents=True)
        self.archive = self.tmp / "archive"
        self.archive.mkdir()
        patch = mock.patch.object(bi, "PACKAGES", ["libc6", "tzdata"])
        patch.start()
        self.addCleanup(patch.stop)

    def fetch(self, apt, arch="amd64"):
        return run(bi.fetch_packages, arch, apt=apt, cache=self.cache)

    def cached(self):
        return sorted(p.name for p in self.cache.glob("*.deb"))


class VersionChoice(Base):
    def test_the_candidate_is_taken_though_an_older_version_sorts_after_it_by_name(self):
        # By file name u9 sorts after u10: what the build took before.
        make_deb(self.cache, "libc6", "2.36-9+deb12u9")
        make_deb(self.cache, "libc6", "2.36-9+deb12u10")
        make_deb(self.cache, "tzdata", "2026f-0+deb12u1", "all")
        for p in self.cache.glob("*.deb"):
            shutil.copy(p, self.archive)
        apt = FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u10", "tzdata": "2026f-0+deb12u1"})
        debs, log = self.fetch(apt)
        self.assertEqual([(d.package, d.version) for d in debs], [("libc6", "2.36-9+deb12u10"), ("tzdata", "2026f-0+deb12u1")])
        self.assertEqual(apt.downloads, [])
        # The older one is dropped from the cache, and the log says it was behind.
        self.assertEqual(self.cached(), ["libc6_2.36-9+deb12u10_amd64.deb", "tzdata_2026f-0+deb12u1_all.deb"])
        self.assertIn("libc6 2.36-9+deb12u10 (amd64): cached", log)
        self.assertIn("dropped libc6_2.36-9+deb12u9_amd64.deb from the cache", log)

    def test_a_security_update_is_downloaded_over_the_cached_version_and_the_log_says_so(self):
        make_deb(self.cache, "libc6", "2.36-9+deb12u9")
        make_deb(self.cache, "tzdata", "2026b-0+deb12u1", "all")
        make_deb(self.archive, "libc6", "2.36-9+deb12u13")
        make_deb(self.archive, "tzdata", "2026f-0+deb12u1", "all")
        bi.record_build(self.cache, [bi.Deb(p) for p in self.cache.glob("*.deb")])
        apt = FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"})
        debs, log = self.fetch(apt)
        self.assertEqual(apt.downloads, ["libc6:amd64=2.36-9+deb12u13", "tzdata=2026f-0+deb12u1"])
        self.assertEqual([d.path.name for d in debs], ["libc6_2.36-9+deb12u13_amd64.deb", "tzdata_2026f-0+deb12u1_all.deb"])
        self.assertEqual(self.cached(), ["libc6_2.36-9+deb12u13_amd64.deb", "tzdata_2026f-0+deb12u1_all.deb"])
        self.assertIn("libc6 2.36-9+deb12u13 (amd64): downloaded; UPDATED since the last build, which had 2.36-9+deb12u9",
                      log)
        self.assertIn("tzdata 2026f-0+deb12u1 (all): downloaded; UPDATED since the last build, which had 2026b-0+deb12u1",
                      log)
        # The next build finds them cached and has nothing to report.
        bi.record_build(self.cache, debs)
        debs, log = self.fetch(apt)
        self.assertEqual(len(apt.downloads), 2)
        self.assertIn("libc6 2.36-9+deb12u13 (amd64): cached\n", log)
        self.assertNotIn("UPDATED", log)

    def test_the_record_of_the_last_build_names_the_change_when_the_cache_no_longer_has_the_old_file(self):
        make_deb(self.archive, "libc6", "2.36-9+deb12u13")
        make_deb(self.archive, "tzdata", "2026f-0+deb12u1", "all")
        (self.cache / "last-build.json").write_text(json.dumps({"libc6": "2.36-9+deb12u9", "tzdata": "2026f-0+deb12u1"}))
        _, log = self.fetch(FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"}))
        self.assertIn("libc6 2.36-9+deb12u13 (amd64): downloaded; UPDATED since the last build, which had 2.36-9+deb12u9", log)
        self.assertIn("tzdata 2026f-0+deb12u1 (all): downloaded\n", log)

    def test_a_candidate_older_than_the_last_build_is_taken_and_named(self):
        make_deb(self.cache, "libc6", "2.36-9+deb12u13")
        make_deb(self.archive, "libc6", "2.36-9+deb12u12")
        make_deb(self.archive, "tzdata", "2026f-0+deb12u1", "all")
        debs, log = self.fetch(FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u12", "tzdata": "2026f-0+deb12u1"}))
        self.assertEqual(debs[0].version, "2.36-9+deb12u12")
        self.assertIn("OLDER than the last build's 2.36-9+deb12u13", log)

    def test_a_cached_file_whose_checksum_is_not_apts_is_fetched_again(self):
        make_deb(self.archive, "libc6", "2.36-9+deb12u13")
        make_deb(self.archive, "tzdata", "2026f-0+deb12u1", "all")
        for p in self.archive.glob("*.deb"):
            shutil.copy(p, self.cache)
        make_deb(self.cache, "libc6", "2.36-9+deb12u13", Section="tampered")  # same name, other bytes
        apt = FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"})
        debs, log = self.fetch(apt)
        self.assertEqual(apt.downloads, ["libc6:amd64=2.36-9+deb12u13"])
        self.assertIn("SHA-256 differs", log)
        self.assertNotIn("Section", debs[0].fields)

    def test_arm64_takes_the_arm64_build_and_the_architecture_independent_ones(self):
        cache = self.tmp / "cache" / "image-debs-arm64"
        make_deb(self.archive, "libc6", "2.36-9+deb12u13", "arm64")
        make_deb(self.archive, "tzdata", "2026f-0+deb12u1", "all")
        apt = FakeApt(self.archive, {"libc6:arm64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"})
        debs, _ = run(bi.fetch_packages, "arm64", apt=apt, cache=cache)
        self.assertEqual(apt.downloads, ["libc6:arm64=2.36-9+deb12u13", "tzdata=2026f-0+deb12u1"])
        self.assertEqual([d.arch for d in debs], ["arm64", "all"])

    def test_no_candidate_stops_the_build_and_names_the_missing_architecture(self):
        apt = FakeApt(self.archive, {"tzdata": "2026f-0+deb12u1"}, foreign=False)
        with self.assertRaises(SystemExit) as e:
            run(bi.fetch_packages, "arm64", apt=apt, cache=self.cache)
        self.assertIn("no candidate version of libc6:arm64", str(e.exception))
        self.assertIn("install-deps.sh --arm64", str(e.exception))

    def test_a_candidate_that_cannot_be_downloaded_stops_the_build(self):
        apt = FakeApt(self.archive, {"libc6:amd64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"})
        with self.assertRaises(SystemExit) as e:
            self.fetch(apt)
        self.assertIn("apt-get download libc6:amd64=2.36-9+deb12u13 failed", str(e.exception))


class Lists(Base):
    def setUp(self):
        super().setUp()
        make_deb(self.cache, "libc6", "2.36-9+deb12u13")
        make_deb(self.cache, "tzdata", "2026f-0+deb12u1", "all")
        self.candidates = {"libc6:amd64": "2.36-9+deb12u13", "tzdata": "2026f-0+deb12u1"}
        self.stamp = self.cache.parent / "apt-lists-refreshed"

    def test_lists_of_today_are_used_as_they_are(self):
        apt = FakeApt(self.archive, self.candidates, lists_age=3 * 3600)
        _, log = self.fetch(apt)
        self.assertEqual(apt.updates, 0)
        self.assertIn("apt's package lists: 3.0 h old", log)

    def test_lists_older_than_a_day_are_refreshed_and_the_refresh_counts_as_their_age(self):
        apt = FakeApt(self.archive, self.candidates, lists_age=3 * 86400)
        _, log = self.fetch(apt)
        self.assertEqual(apt.updates, 1)
        self.assertIn("3.0 days old: apt-get update", log)
        self.assertTrue(self.stamp.exists())
        # An update that found nothing new leaves the Release files old: the stamp says when it ran.
        self.fetch(apt)
        self.assertEqual(apt.updates, 1)

    def test_missing_lists_are_fetched(self):
        apt = FakeApt(self.archive, self.candidates, lists_age=None)
        _, log = self.fetch(apt)
        self.assertEqual(apt.updates, 1)
        self.assertIn("apt's package lists: none", log)

    def test_a_failed_refresh_is_said_loudly(self):
        apt = FakeApt(self.archive, self.candidates, lists_age=2 * 86400, update_ok=False)
        debs, log = self.fetch(apt)
        self.assertEqual(len(debs), 2)
        self.assertIn("WARNING: apt-get update failed", log)
        self.assertIn("2.0 days ago", log)
        self.assertFalse(self.stamp.exists())


class DpkgStatus(Base):
    def test_one_stanza_per_package_sorted_with_the_fields_scanners_read(self):
        debs = [bi.Deb(make_deb(self.cache, "tzdata", "2026f-0+deb12u1", "all", Section="localization",
                                Priority="required", Provides="tzdata-bookworm")),
                bi.Deb(make_deb(self.cache, "libgcc-s1", "12.2.0-14+deb12u1", Source="gcc-12",
                                Section="libs", Priority="optional", **{"Multi-Arch": "same"}))]
        status = bi.dpkg_status(debs).decode()
        self.assertEqual(status, bi.dpkg_status(list(reversed(debs))).decode())
        self.assertEqual(status, """\
Package: libgcc-s1
Status: install ok installed
Priority: optional
Section: libs
Maintainer: Someone <a@b.example>
Architecture: amd64
Multi-Arch: same
Source: gcc-12
Version: 12.2.0-14+deb12u1
Description: the libgcc-s1 package
 A longer text.
 .
 Its second paragraph.

Package: tzdata
Status: install ok installed
Priority: required
Section: localization
Maintainer: Someone <a@b.example>
Architecture: all
Version: 2026f-0+deb12u1
Provides: tzdata-bookworm
Description: the tzdata package
 A longer text.
 .
 Its second paragraph.
""")


class AptQueries(unittest.TestCase):
    POLICY = """libc6:
  Installed: 2.36-9+deb12u13
  Candidate: 2.36-9+deb12u14
  Version table:
     2.36-9+deb12u14 500
        500 http://deb.debian.org/debian-security bookworm-security/main amd64 Packages
"""

    def test_the_candidate_is_read_from_apt_cache_policy_in_the_C_locale(self):
        done = subprocess.CompletedProcess([], 0, self.POLICY, "")
        with mock.patch.object(bi.subprocess, "run", return_value=done) as r:
            self.assertEqual(bi.Apt().candidate("libc6:amd64"), "2.36-9+deb12u14")
        self.assertEqual(r.call_args.args[0], ["apt-cache", "policy", "libc6:amd64"])
        self.assertEqual(r.call_args.kwargs["env"]["LC_ALL"], "C")
        for out in ("libc6:\n  Installed: (none)\n  Candidate: (none)\n", ""):
            with mock.patch.object(bi.subprocess, "run", return_value=subprocess.CompletedProcess([], 0, out, "")):
                self.assertIsNone(bi.Apt().candidate("libc6:arm64"))

    def test_names_and_debians_version_order(self):
        self.assertEqual([bi.apt_name(p, "arm64") for p in ("libc6", "tzdata", "netbase")],
                         ["libc6:arm64", "tzdata", "netbase"])
        self.assertEqual(bi.compare_versions("2.36-9+deb12u10", "2.36-9+deb12u9"), 1)
        self.assertEqual(bi.compare_versions("1:1.0", "2.0"), 1)
        self.assertEqual(bi.compare_versions("1.0~rc1", "1.0"), -1)
        self.assertEqual(bi.compare_versions("6.4", "6.4"), 0)


if __name__ == "__main__":
    unittest.main()
