"""What the build says about the PHP it embeds, without the network: scripts/fetch-source.py's
choice of a version and its report, given fake index records and a fake downloader, and
scripts/php-currency.py's warnings, record and PHP_WORKER_REQUIRE_CURRENT_PHP, given fake
records and a fake clock.

    python3 -m unittest discover -s tests/scripts -v
"""

import contextlib
import datetime
import hashlib
import importlib.util
import io
import json
import os
import subprocess
import sys
import tarfile
import tempfile
import unittest
from pathlib import Path
from unittest import mock

SCRIPTS = Path(__file__).resolve().parents[2] / "scripts"


def load(name, file):
    spec = importlib.util.spec_from_file_location(name, SCRIPTS / file)
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


fs = load("fetch_source", "fetch-source.py")
cur = load("php_currency", "php-currency.py")

POOL, SECURITY_POOL = "pool/main/p/php8.4", "pool/updates/main/p/php8.4"


def record(version, directory=POOL, files=None):
    plain = version.split(":", 1)[-1]
    return (version, directory, files if files is not None else {f"php8.4_{plain}.dsc": "0" * 64})


# What Debian's indexes listed on the machine this was written on: 8.4.24 is the newest
# release that downloads, found by guessing below the listed ones.
LISTED = [record("8.4.27-1~deb13u1"), record("8.4.28-1~deb13u1", SECURITY_POOL), record("8.4.27-1")]


def stderr_of(fn, *args, **kw):
    err = io.StringIO()
    with contextlib.redirect_stderr(err):
        result = fn(*args, **kw)
    return result, err.getvalue()


class FetchSourceChoice(unittest.TestCase):
    def test_the_first_that_downloads_is_taken_and_the_listed_ones_before_it_are_named(self):
        candidates = [record("8.4.28-1~deb13u1"), record("8.4.27-1"), ("8.4.26-1~deb13u1", POOL, {}), record("8.4.24-1")]
        tried = []

        def attempt(c):
            tried.append(c[0])
            return "/src/php8.4-8.4.24" if c[0] == "8.4.24-1" else None

        (got, version, unfetched), err = stderr_of(fs.choose, candidates, attempt, "php8.4")
        self.assertEqual((got, version), ("/src/php8.4-8.4.24", "8.4.24-1"))
        self.assertEqual(tried, ["8.4.28-1~deb13u1", "8.4.27-1", "8.4.26-1~deb13u1", "8.4.24-1"])
        self.assertEqual(unfetched, ["8.4.28-1~deb13u1", "8.4.27-1"], "a guess (no files listed) is no news")
        self.assertIn("php8.4 8.4.28-1~deb13u1 is listed but does not download, trying the next", err)
        self.assertNotIn("8.4.26", err)

    def test_nothing_downloads(self):
        (got, version, unfetched), _ = stderr_of(fs.choose, [record("8.4.28-1")], lambda c: None, "php8.4")
        self.assertEqual((got, version, unfetched), (None, None, ["8.4.28-1"]))

    def test_newer_upstreams_are_upstream_versions_once_each_oldest_first(self):
        self.assertEqual(fs.newer_upstreams(["8.4.28-1~deb13u1", "8.4.27-1", "8.4.27-1~deb13u1", "8.4.24-2"], "8.4.24"),
                         ["8.4.27", "8.4.28"])
        self.assertEqual(fs.newer_upstreams(["1:3.0.1-1", "1:3.0.0-1"], "3.0.0"), ["3.0.1"])

    def test_a_fetch_through_a_fake_mirror_keeps_its_report_beside_the_source(self):
        """The real download path (try_version with --upstream-only), with a downloader that
        serves one upstream tarball and nothing else."""
        with tempfile.TemporaryDirectory() as tmp:
            tarball = Path(tmp) / "orig.tar.gz"
            top = Path(tmp) / "php-8.4.24"
            top.mkdir()
            (top / "configure.ac").write_text("AC_INIT\n")
            with tarfile.open(tarball, "w:gz") as t:
                t.add(top, arcname="php-8.4.24")
            data = tarball.read_bytes()
            served = {"php8.4_8.4.24.orig.tar.gz": data}
            orig = {"php8.4_8.4.24.orig.tar.gz": hashlib.sha256(data).hexdigest()}
            records = LISTED + [record("8.4.24-1~deb13u1", files=orig)]
            asked = []

            def download(url, dest, sha256=None):
                asked.append(url)
                name = url.rsplit("/", 1)[-1]
                if name not in served:
                    return False
                Path(dest).write_bytes(served[name])
                return True

            dest = Path(tmp) / "src"
            dest.mkdir()
            with mock.patch.object(fs, "download", download), mock.patch.object(fs, "cache_root", lambda: tmp):
                got, err = stderr_of(fs.fetch, "php8.4", records, str(dest), upstream_only=True, suites="newer")
            self.assertEqual(got, str(dest / "php8.4-8.4.24"))
            self.assertTrue((dest / "php8.4-8.4.24" / "configure.ac").exists())
            self.assertEqual((dest / "php8.4-8.4.24" / ".debian-version").read_text(), "8.4.24-1~deb13u1\n")
            report = json.loads((dest / "php8.4-8.4.24" / ".fetch-report.json").read_text())
            self.assertEqual(report["taken"], "8.4.24-1~deb13u1")
            self.assertEqual(report["unfetched"], ["8.4.28-1~deb13u1", "8.4.27-1~deb13u1", "8.4.27-1"])
            self.assertEqual(report["listed"][0], "8.4.28-1~deb13u1")
            self.assertEqual(fs.read_report(str(dest / "php8.4-8.4.24")), report)
            self.assertIn("php8.4: took 8.4.24; the indexes list 8.4.27, 8.4.28, which did not download", err)
            self.assertTrue(any("debian-security/pool/updates/main/p/php8.4/php8.4_8.4.28-1~deb13u1.dsc" in u for u in asked),
                            "a security update is asked of the security archive")


TODAY = datetime.date(2026, 12, 7)
AFTER_82 = datetime.date(2027, 1, 1)


class Currency(unittest.TestCase):
    def test_the_eol_table(self):
        table = cur.load_eol()
        self.assertEqual(table["8.2"], datetime.date(2026, 12, 31))
        self.assertEqual(table["8.4"], datetime.date(2028, 12, 31))

    def test_behind_with_releases_that_do_not_download(self):
        report = {"unfetched": ["8.4.27-1~deb13u1", "8.4.28-1~deb13u1", "8.4.27-1"]}
        rec = cur.assess("8.4.24", "8.4", LISTED, report, datetime.date(2028, 12, 31), "2026-12-07")
        self.assertEqual((rec["current"], rec["newest_listed"], rec["listed_newer"]), ("no", "8.4.28", "8.4.27 8.4.28"))
        self.assertEqual((rec["not_downloadable"], rec["downloadable"], rec["unknown"]), ("8.4.27 8.4.28", "", ""))
        self.assertEqual(rec["security"], "8.4.28")
        (warning,) = cur.warnings(rec, TODAY)
        self.assertEqual(warning[0], "WARNING: PHP 8.4.24 is embedded, but Debian lists newer releases of PHP 8.4: "
                                     "8.4.27, 8.4.28 (8.4.28 from its security archive).")
        self.assertIn("8.4.27, 8.4.28 could not be downloaded", warning[1])
        self.assertEqual(cur.missing(rec, TODAY), ["PHP 8.4.27, 8.4.28 (Debian lists them; this build has 8.4.24)"])
        self.assertEqual(cur.notes(rec, TODAY), [])

    def test_untried_releases_are_tried_once_and_the_answers_kept(self):
        report = {}
        answers = {"8.4.27-1~deb13u1": False, "8.4.27-1": False, "8.4.28-1~deb13u1": None}
        asked = []

        def available(r):
            asked.append(r[0])
            return answers[r[0]]

        self.assertTrue(cur.try_untried("8.4.24", LISTED + [record("8.4.24-1")], report, available))
        self.assertEqual(sorted(asked), sorted(answers), "only the releases above the embedded one")
        self.assertEqual(sorted(report["unfetched"]), ["8.4.27-1", "8.4.27-1~deb13u1"])
        rec = cur.assess("8.4.24", "8.4", LISTED, report, None, "2026-12-07")
        self.assertEqual((rec["not_downloadable"], rec["unknown"]), ("8.4.27", "8.4.28"))
        self.assertIn("Whether 8.4.28 downloads could not be checked", "\n".join(cur.warnings(rec, TODAY)[0]))
        asked.clear()
        answers["8.4.28-1~deb13u1"] = True
        cur.try_untried("8.4.24", LISTED, report, available)
        self.assertEqual(asked, ["8.4.28-1~deb13u1"], "what is known is not asked again")
        rec = cur.assess("8.4.24", "8.4", LISTED, report, None, "2026-12-07")
        self.assertEqual(rec["downloadable"], "8.4.28")
        text = "\n".join(cur.warnings(rec, TODAY, "/c/src/newer/php8.4-8.4.24", "/c/php-8.4-zts-x")[0])
        self.assertIn("8.4.28 downloads now", text)
        self.assertIn("remove /c/src/newer/php8.4-8.4.24 and /c/php-8.4-zts-x", text)

    def test_current(self):
        rec = cur.assess("8.4.28", "8.4", LISTED + [record("8.4.28-1")], {}, datetime.date(2028, 12, 31), "2026-12-07")
        self.assertEqual((rec["current"], rec["newest_listed"], rec["listed_newer"]), ("yes", "8.4.28", ""))
        self.assertEqual(cur.warnings(rec, TODAY), [])
        self.assertEqual(cur.missing(rec, TODAY), [])

    def test_end_of_life_against_the_clock(self):
        rec = cur.assess("8.2.36", "8.2", [record("8.2.36-1~deb12u1")], {}, datetime.date(2026, 12, 31), "2026-12-07")
        self.assertEqual(cur.warnings(rec, TODAY), [])
        self.assertEqual(cur.notes(rec, TODAY), ["note: PHP 8.2's security support ends on 2026-12-31, in 24 days."])
        self.assertEqual(cur.warnings(rec, datetime.date(2026, 12, 31)), [], "the last day is still supported")
        (warning,) = cur.warnings(rec, AFTER_82)
        self.assertEqual(warning[0], "WARNING: PHP 8.2 reached its end of life on 2026-12-31: "
                                     "PHP publishes no security fix for it any more.")
        self.assertEqual(cur.missing(rec, AFTER_82), ["security support for PHP 8.2 (it ended on 2026-12-31)"])

    def test_indexes_that_cannot_be_read(self):
        rec = cur.assess("8.4.24", "8.4", None, {}, datetime.date(2028, 12, 31), "")
        self.assertEqual(rec["current"], "unknown")
        self.assertEqual(cur.warnings(rec, TODAY), [])
        self.assertTrue(cur.missing(rec, TODAY), "a release pipeline does not take an unchecked PHP")

    def test_the_record_and_the_linker_flags(self):
        rec = cur.assess("8.4.24", "8.4", LISTED, {"unfetched": [r[0] for r in LISTED]}, datetime.date(2028, 12, 31), "2026-12-07")
        text = cur.format_record(rec)
        self.assertIn("\nlisted_newer=8.4.27 8.4.28\n", text)
        self.assertEqual(cur.parse_record(text), rec)
        self.assertEqual(cur.ldflags(rec, "m"), "-X m.phpListedNewer=8.4.27,8.4.28 -X m.phpListedChecked=2026-12-07")
        self.assertEqual(cur.ldflags({}, "m"), "")

    def test_require_current_php_fails_naming_what_is_missing(self):
        rec = cur.assess("8.4.24", "8.4", LISTED, {"unfetched": [r[0] for r in LISTED]}, datetime.date(2028, 12, 31), "2026-12-07")
        with mock.patch.dict(os.environ, {"PHP_WORKER_REQUIRE_CURRENT_PHP": "1"}):
            status, err = stderr_of(cur.report_and_decide, rec, TODAY)
        self.assertEqual(status, 1)
        self.assertIn("PHP_WORKER_REQUIRE_CURRENT_PHP=1: PHP 8.4.24 is not current; it lacks PHP 8.4.27, 8.4.28", err)
        with mock.patch.dict(os.environ, {"PHP_WORKER_REQUIRE_CURRENT_PHP": "0"}):
            status, err = stderr_of(cur.report_and_decide, rec, TODAY)
        self.assertEqual(status, 0)
        self.assertIn("WARNING: PHP 8.4.24 is embedded", err)
        self.assertIn("PHP_WORKER_REQUIRE_CURRENT_PHP=1 makes this an error", err)

    def test_ldflags_command_on_a_cached_build(self):
        """xcaddy.sh's side: a cached build's record, stamped in, or refused."""
        rec = cur.assess("8.4.24", "8.4", LISTED, {"unfetched": [r[0] for r in LISTED]}, datetime.date(2028, 12, 31), "2026-12-07")
        with tempfile.TemporaryDirectory() as prefix:

            def run(require):
                env = dict(os.environ, PHP_WORKER_REQUIRE_CURRENT_PHP=require)
                return subprocess.run([sys.executable, str(SCRIPTS / "php-currency.py"), "ldflags", "--log-name", "xcaddy.sh",
                                       "--prefix", prefix, "--module", "m"], capture_output=True, text=True, env=env)

            p = run("1")
            self.assertEqual(p.returncode, 1, "no record: nothing says the PHP is current")
            self.assertIn(".currency is missing", p.stderr)
            self.assertEqual((run("").returncode, run("").stdout), (0, "\n"), "no record, nothing required: no flags")
            Path(prefix, ".currency").write_text(cur.format_record(rec))
            p = run("")
            self.assertEqual(p.returncode, 0, p.stderr)
            self.assertEqual(p.stdout.strip(), "-X m.phpListedNewer=8.4.27,8.4.28 -X m.phpListedChecked=2026-12-07")
            self.assertIn("xcaddy.sh: WARNING: PHP 8.4.24 is embedded, but Debian lists newer releases of PHP 8.4", p.stderr)
            p = run("1")
            self.assertEqual((p.returncode, p.stdout), (1, ""))
            self.assertIn("it lacks PHP 8.4.27, 8.4.28", p.stderr)


if __name__ == "__main__":
    unittest.main()
