#!/usr/bin/env python3
"""Says whether the PHP a build embeds is current: the newest release of its branch that
Debian lists, of a branch that PHP still gives security fixes.

    scripts/php-currency.py check --package php8.4 --suites newer --branch 8.4
                                  (--prefix PREFIX | --version 8.4.24) [--source DIR]
    scripts/php-currency.py ldflags --prefix PREFIX --module IMPORT_PATH

check reads the releases of the branch that Debian's source indexes list, through the
private apt state of scripts/fetch-source.py (refreshed when older than a day; when that
fails, the indexes last read), and what the fetch of the source found, kept beside it
(DIR/.fetch-report.json; DIR, the unpacked source, is <cache>/src/<suites>/<package>-<version>
unless given). A listed release above the embedded one that no fetch has tried (listed
after the source was unpacked, or unpacked before fetch-source.py kept reports) is tried
now, its .dsc alone, and the answer kept in that report. Newer releases listed, or a
branch past the end of its security support (go-module/php-eol.txt, against today's
date), make a warning on stderr. With --prefix it writes what it found to PREFIX/.currency
(key=value lines), which the binaries built on that PHP report.

ldflags prints the Go linker flags (-X ...) that stamp PREFIX/.currency into the Go module
(go-module/phpcurrency.go); nothing when there is no record (a PHP of your own).

PHP_WORKER_REQUIRE_CURRENT_PHP=1 turns the warnings of both into a failure (exit 1) that
names what is missing, and, for ldflags, a missing record into one too: for release
pipelines, which must not ship a PHP that is behind.
"""

import argparse
import datetime
import fcntl
import importlib.util
import os
import sys
import tempfile
import urllib.error
import urllib.request

SCRIPTS = os.path.dirname(os.path.abspath(__file__))
EOL_TABLE = os.path.join(SCRIPTS, "..", "go-module", "php-eol.txt")
RECORD = ".currency"

_spec = importlib.util.spec_from_file_location("fetch_source", os.path.join(SCRIPTS, "fetch-source.py"))
fs = importlib.util.module_from_spec(_spec)
_spec.loader.exec_module(fs)

NAME = "php-currency"  # the prefix of its lines on stderr (--log-name)


def say(line=""):
    print(f"{NAME}: {line}", file=sys.stderr, flush=True)


def load_eol(path=EOL_TABLE):
    """{branch: date} from the table of branches and their end of security support."""
    table = {}
    with open(path) as f:
        for line in f:
            fields = line.split("#", 1)[0].split()
            if len(fields) == 2:
                table[fields[0]] = datetime.date.fromisoformat(fields[1])
    return table


def join(items):
    return ", ".join(items)


# --- what is known: pure functions of their arguments (tests/scripts/test_php_currency.py) ---

def untried(version, listed, report):
    """The listed (version, directory, files) records above the embedded upstream version
    that no fetch has tried: neither in the report's unfetched nor its fetchable lists."""
    known = set(report.get("unfetched", [])) | set(report.get("fetchable", []))
    return [r for r in listed if fs.upstream_key(r[0]) > fs.version_key(version) and r[0] not in known]


def try_untried(version, listed, report, available):
    """Asks available(record) -> True, False or None (no answer) about each untried record
    and notes the answers in report (a dict, changed in place). Returns whether it changed."""
    changed = False
    for record in untried(version, listed, report):
        answer = available(record)
        if answer is None:
            continue
        report.setdefault("fetchable" if answer else "unfetched", []).append(record[0])
        changed = True
    return changed


def assess(version, branch, listed, report, eol, checked):
    """The record of an embedded PHP: version ("8.4.24") of branch ("8.4"); listed, the
    (version, directory, files) records Debian's indexes list for the branch, None when
    they could not be read; report, what fetches found ({"unfetched": [...], "fetchable":
    [...]}); eol, the branch's last day of security support or None; checked, the day the
    indexes were read. Returns a dict of strings (the .currency file's keys)."""
    rec = {"version": version, "branch": branch, "eol": eol.isoformat() if eol else ""}
    if listed is None:
        rec.update(checked="", current="unknown", newest_listed="", listed_newer="",
                   not_downloadable="", downloadable="", unknown="", security="")
        return rec
    newer = fs.newer_upstreams([r[0] for r in listed], version)
    unfetched, fetchable = set(report.get("unfetched", [])), set(report.get("fetchable", []))
    groups = {"not_downloadable": [], "downloadable": [], "unknown": [], "security": []}
    for up in newer:
        debs = [r for r in listed if fs.upstream_of(r[0]) == up]
        if any(r[0] in fetchable for r in debs):
            groups["downloadable"].append(up)
        elif all(r[0] in unfetched for r in debs):
            groups["not_downloadable"].append(up)
        else:
            groups["unknown"].append(up)
        # The security archive's pool is pool/updates/: a Debian security update.
        if any(r[1].startswith("pool/updates/") for r in debs):
            groups["security"].append(up)
    rec.update(checked=checked, current="no" if newer else "yes", newest_listed=newer[-1] if newer else version,
               listed_newer=" ".join(newer), **{k: " ".join(v) for k, v in groups.items()})
    return rec


def eol_passed(rec, today):
    return bool(rec.get("eol")) and today > datetime.date.fromisoformat(rec["eol"])


def warnings(rec, today, source="", prefix=""):
    """The warnings about a record, each a list of lines (the first one says it all)."""
    out = []
    v, branch = rec["version"], rec["branch"]
    newer = rec.get("listed_newer", "").split()
    if newer:
        one = len(newer) == 1
        security = rec.get("security", "").split()
        tag = (" (from its security archive)" if security == newer else
               f" ({join(security)} from its security archive)" if security else "")
        lines = [f"WARNING: PHP {v} is embedded, but Debian lists {'a newer release' if one else 'newer releases'} "
                 f"of PHP {branch}: {join(newer)}{tag}."]
        nd, dl, unk = (rec.get(k, "").split() for k in ("not_downloadable", "downloadable", "unknown"))
        if nd:
            lines.append(f"  {join(nd)} could not be downloaded (Debian's mirror does not serve "
                         f"{'its' if len(nd) == 1 else 'their'} files), so the build took {v}, the newest release that does.")
        if dl:
            lines.append(f"  {join(dl)} {'downloads' if len(dl) == 1 else 'download'} now (listed after this build's source was fetched): "
                         f"remove {source or 'the unpacked source'}{' and ' + prefix if prefix else ''} to build on it.")
        if unk:
            lines.append(f"  Whether {join(unk)} {'downloads' if len(unk) == 1 else 'download'} could not be checked (no answer from Debian's mirror).")
        lines.append(f"  PHP's security fixes come out in its patch releases: this build lacks those of {join(newer)}.")
        out.append(lines)
    if eol_passed(rec, today):
        out.append([f"WARNING: PHP {branch} reached its end of life on {rec['eol']}: PHP publishes no security fix for it any more.",
                    "  Build on a supported branch (PHP_VERSION=8.4)."])
    return out


def notes(rec, today):
    """Lines that are no warning: an end of life within 90 days, a currency not checked."""
    out = []
    if rec.get("eol") and not eol_passed(rec, today):
        days = (datetime.date.fromisoformat(rec["eol"]) - today).days
        if days <= 90:
            out.append(f"note: PHP {rec['branch']}'s security support ends on {rec['eol']}, in {days} days.")
    if rec.get("current") == "unknown":
        out.append(f"note: Debian's indexes could not be read: whether PHP {rec['version']} is the newest release of PHP {rec['branch']} is unknown.")
    return out


def missing(rec, today):
    """What a current PHP would have and this one lacks, for PHP_WORKER_REQUIRE_CURRENT_PHP."""
    out = []
    if rec.get("listed_newer"):
        out.append(f"PHP {join(rec['listed_newer'].split())} (Debian lists {'it' if len(rec['listed_newer'].split()) == 1 else 'them'}; "
                   f"this build has {rec['version']})")
    if eol_passed(rec, today):
        out.append(f"security support for PHP {rec['branch']} (it ended on {rec['eol']})")
    if rec.get("current") == "unknown":
        out.append(f"a check of PHP {rec['version']} against Debian's releases (the indexes could not be read)")
    return out


def format_record(rec):
    lines = [f"# scripts/php-currency.py: PHP {rec['version']} against the releases of PHP {rec['branch']} Debian lists\n"]
    lines += [f"{k}={rec[k]}\n" for k in ("version", "branch", "checked", "current", "newest_listed", "listed_newer",
                                          "not_downloadable", "downloadable", "unknown", "security", "eol")]
    return "".join(lines)


def parse_record(text):
    rec = {}
    for line in text.splitlines():
        if "=" in line and not line.startswith("#"):
            k, _, v = line.partition("=")
            rec[k.strip()] = v.strip()
    return rec


def ldflags(rec, module):
    """The -X flags that stamp a record into the Go module (values without spaces)."""
    if not rec:
        return ""
    return (f"-X {module}.phpListedNewer={','.join(rec.get('listed_newer', '').split())} "
            f"-X {module}.phpListedChecked={rec.get('checked', '')}")


# --- the outside world: Debian's indexes and mirror, the files ---

def available(record):
    """Whether a listed version's .dsc downloads: True, False (the mirror answers that it
    has no such file), or None (no answer)."""
    version, directory, _ = record
    name = f"{os.path.basename(directory)}_{version.split(':', 1)[-1]}.dsc"
    main = directory.replace("pool/updates/", "pool/", 1)
    security = main.replace("pool/", "pool/updates/", 1)
    answer = False
    for mirror, d in zip(fs.MIRRORS, (main, security)):
        try:
            with urllib.request.urlopen(f"{mirror}/{d}/{name}", timeout=30) as r:
                r.read()
                return True
        except urllib.error.HTTPError:
            pass
        except (urllib.error.URLError, OSError):
            answer = None
    return answer


def listed_records(package, suites, branch):
    """The index records of the branch, or None when the indexes cannot be read."""
    os.makedirs(fs.cache_root(), exist_ok=True)
    with open(os.path.join(fs.cache_root(), ".lock-fetch"), "w") as lock:
        fcntl.flock(lock, fcntl.LOCK_EX)  # fetch-source.py refreshes the same lists
        try:
            opts = fs.apt_state(suites, soft=True)
            records = fs.index_records(package, opts)
        except (OSError, ValueError) as e:
            say(f"cannot read the {suites} source indexes: {e}")
            return None
    if fs.indexes_read_on(suites) is None:
        return None
    return [r for r in records if fs.upstream_of(r[0]).startswith(branch + ".")]


def write_atomic(path, text):
    fd, tmp = tempfile.mkstemp(dir=os.path.dirname(path), prefix=".currency-")
    with os.fdopen(fd, "w") as f:
        f.write(text)
    os.chmod(tmp, 0o644)
    os.replace(tmp, path)


def required():
    return os.environ.get("PHP_WORKER_REQUIRE_CURRENT_PHP", "") not in ("", "0")


def report_and_decide(rec, today, source="", prefix=""):
    """Prints the warnings and notes; returns the exit status."""
    said = warnings(rec, today, source, prefix)
    for w in said:
        for line in w:
            say(line)
    if said and not required():
        say("  (PHP_WORKER_REQUIRE_CURRENT_PHP=1 makes this an error.)")
    for line in notes(rec, today):
        say(line)
    miss = missing(rec, today)
    if miss and required():
        say(f"PHP_WORKER_REQUIRE_CURRENT_PHP=1: PHP {rec['version']} is not current; it lacks {'; '.join(miss)}.")
        return 1
    return 0


def check(args, today):
    version = args.version
    if args.prefix and not version:
        with open(os.path.join(args.prefix, ".version")) as f:
            version = f.read().strip()
    source = args.source or os.path.join(fs.cache_root(), "src", args.suites, f"{args.package}-{version}")
    report = fs.read_report(source) if os.path.isdir(source) else {}
    listed = listed_records(args.package, args.suites, args.branch)
    if listed is not None and try_untried(version, listed, report, available) and os.path.isdir(source):
        fs.write_report(source, report)
    rec = assess(version, args.branch, listed, report, load_eol().get(args.branch), fs.indexes_read_on(args.suites) or "")
    if args.prefix:
        path = os.path.join(args.prefix, RECORD)
        if listed is None and os.path.exists(path):
            with open(path) as f:  # keep what an earlier check found
                rec = parse_record(f.read())
            say(f"Debian's indexes could not be read: what {path} says of {rec.get('checked') or 'an unknown day'} stands.")
        else:
            write_atomic(path, format_record(rec))
    return report_and_decide(rec, today, source, args.prefix)


def main():
    global NAME
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("command", choices=("check", "ldflags"))
    ap.add_argument("--package")
    ap.add_argument("--suites", choices=sorted(fs.SUITES))
    ap.add_argument("--branch")
    ap.add_argument("--version")
    ap.add_argument("--prefix")
    ap.add_argument("--source")
    ap.add_argument("--module")
    ap.add_argument("--log-name", default=NAME)
    args = ap.parse_args()
    NAME = args.log_name
    today = datetime.datetime.now(datetime.timezone.utc).date()
    if args.command == "check":
        if not (args.package and args.suites and args.branch and (args.prefix or args.version)):
            ap.error("check needs --package, --suites, --branch and --prefix or --version")
        try:
            sys.exit(check(args, today))
        except Exception as e:  # a bug or an odd cache must not stop a build that asked nothing
            say(f"could not check whether PHP is current: {e!r}")
            sys.exit(1 if required() else 0)
    if not (args.prefix and args.module):
        ap.error("ldflags needs --prefix and --module")
    path = os.path.join(args.prefix, RECORD)
    rec = {}
    if os.path.exists(path):
        with open(path) as f:
            rec = parse_record(f.read())
    elif required():
        say(f"PHP_WORKER_REQUIRE_CURRENT_PHP=1: {path} is missing: nothing says whether this PHP is current "
            "(a PHP of your own, or one built before scripts/build-php.sh kept the record).")
        sys.exit(1)
    if rec:
        # The build's warning, shortened: scripts/build-php.sh said it at length.
        for w in warnings(rec, today):
            say(w[0])
        miss = missing(rec, today)
        if miss and required():
            say(f"PHP_WORKER_REQUIRE_CURRENT_PHP=1: PHP {rec['version']} is not current; it lacks {'; '.join(miss)}.")
            sys.exit(1)
    print(ldflags(rec, args.module))


if __name__ == "__main__":
    main()
