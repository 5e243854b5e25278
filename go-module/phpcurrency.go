// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	_ "embed"
	"fmt"
	"strings"
	"sync"
	"time"

	"go.uber.org/zap"
)

// Whether the linked PHP is current, as the build found it (scripts/php-currency.py keeps
// it in the PHP build's <prefix>/.currency): xcaddy.sh and scripts/build-portable.sh stamp
// these at link time. The end of each branch's security support is not stamped: it comes
// from php-eol.txt, compiled in, and is compared with the date at run time.
var (
	// phpListedNewer lists the releases of the linked PHP's branch above it that Debian's
	// source indexes listed when the binary was built, oldest first ("8.4.27,8.4.28"):
	// releases the build could not take (their files did not download).
	phpListedNewer = ""
	// phpListedChecked is the day (YYYY-MM-DD) the build read Debian's indexes; empty when
	// it did not (a PHP of your own, a binary linked by hand).
	phpListedChecked = ""
)

// phpEOLTable holds PHP's branches and the last day of their security support, the one
// table of these dates (scripts/php-currency.py reads it too).
//
//go:embed php-eol.txt
var phpEOLTable string

// phpEOL is the last day of a branch's ("8.4") security support, or false for a branch
// the table does not know.
func phpEOL(branch string) (time.Time, bool) {
	for _, line := range strings.Split(phpEOLTable, "\n") {
		line, _, _ = strings.Cut(line, "#")
		f := strings.Fields(line)
		if len(f) == 2 && f[0] == branch {
			if t, err := time.Parse(time.DateOnly, f[1]); err == nil {
				return t, true
			}
		}
	}
	return time.Time{}, false
}

// phpCurrency is what is known of the linked PHP at a given time: the status page's
// ?data=php, the php_worker_php_info metric, the start-up warnings, `caddy version`.
type phpCurrency struct {
	Version string `json:"version"`
	Branch  string `json:"branch"`
	// The day the build read Debian's indexes ("" : it did not), the releases of the
	// branch above Version they listed, and the newest release they listed.
	Checked      string   `json:"checked"`
	ListedNewer  []string `json:"listed_newer"`
	NewestListed string   `json:"newest_listed"`
	// Whether no newer release was listed; null when the build did not check.
	Current *bool `json:"current"`
	// The last day of the branch's security support ("" : a branch php-eol.txt does not
	// know), and whether it has passed.
	EOL       string `json:"eol"`
	EOLPassed bool   `json:"eol_passed"`
	// One sentence per thing that is wrong: behind, past its end of life.
	Warnings []string `json:"warnings"`

	behind, eolWarning string // the Warnings, for the log's messages
}

// assessPHP is what is known of PHP version (as PHP names itself: "8.4.24") given the
// build's stamps (listedNewer comma-separated, checked a date or "") at time now.
func assessPHP(version, listedNewer, checked string, now time.Time) phpCurrency {
	c := phpCurrency{Version: version, Checked: checked, ListedNewer: []string{}, Warnings: []string{}}
	if parts := strings.SplitN(version, ".", 3); len(parts) >= 2 {
		c.Branch = parts[0] + "." + parts[1]
	}
	for _, v := range strings.Split(listedNewer, ",") {
		if v = strings.TrimSpace(v); v != "" {
			c.ListedNewer = append(c.ListedNewer, v)
		}
	}
	if checked != "" {
		current := len(c.ListedNewer) == 0
		c.Current = &current
		c.NewestListed = version
		if !current {
			c.NewestListed = c.ListedNewer[len(c.ListedNewer)-1]
			releases, their := "newer releases", "their"
			if len(c.ListedNewer) == 1 {
				releases, their = "a newer release", "its"
			}
			c.behind = fmt.Sprintf("PHP %s is embedded, but Debian listed %s of PHP %s when this binary was built (%s): %s; it lacks %s fixes",
				version, releases, c.Branch, checked, strings.Join(c.ListedNewer, ", "), their)
			c.Warnings = append(c.Warnings, c.behind)
		}
	}
	if eol, ok := phpEOL(c.Branch); ok {
		c.EOL = eol.Format(time.DateOnly)
		// The last day is supported: the end of life is the day after, in UTC.
		c.EOLPassed = !now.UTC().Before(eol.AddDate(0, 0, 1))
		if c.EOLPassed {
			c.eolWarning = fmt.Sprintf("PHP %s reached its end of life on %s: it gets no security fixes any more", c.Branch, c.EOL)
			c.Warnings = append(c.Warnings, c.eolWarning)
		}
	}
	return c
}

// summary is the version line's word on it: "[behind: Debian listed 8.4.27, 8.4.28 on
// 2026-12-07; security support until 2028-12-31]".
func (c phpCurrency) summary() string {
	var parts []string
	switch {
	case c.Current == nil:
		parts = append(parts, "not checked against Debian's releases")
	case *c.Current:
		parts = append(parts, "the newest release Debian listed on "+c.Checked)
	default:
		parts = append(parts, fmt.Sprintf("behind: Debian listed %s on %s", strings.Join(c.ListedNewer, ", "), c.Checked))
	}
	switch {
	case c.EOL == "":
	case c.EOLPassed:
		parts = append(parts, "end of life since "+c.EOL)
	default:
		parts = append(parts, "security support until "+c.EOL)
	}
	return "[" + strings.Join(parts, "; ") + "]"
}

// phpClock and embeddedPHP give what is known of the linked PHP now; tests replace them
// with a fake clock and build values of their own.
var (
	phpClock    = time.Now
	embeddedPHP = func(now time.Time) phpCurrency {
		return assessPHP(phpVersion(), phpListedNewer, phpListedChecked, now)
	}
)

// currentPHP is what is known of the linked PHP at this moment.
func currentPHP() phpCurrency { return embeddedPHP(phpClock()) }

// logPHPCurrency logs a warning for each thing wrong with the linked PHP: newer releases
// listed, a branch past its end of life.
func logPHPCurrency(logger *zap.Logger, c phpCurrency) {
	if c.behind != "" {
		logger.Warn(c.behind, zap.String("php_version", c.Version), zap.Strings("listed_newer", c.ListedNewer),
			zap.String("newest_listed", c.NewestListed), zap.String("checked", c.Checked))
	}
	if c.eolWarning != "" {
		logger.Warn(c.eolWarning, zap.String("php_version", c.Version), zap.String("eol", c.EOL))
	}
}

// phpCurrencyLogged makes the start-up warnings once per process, not at every reload.
var phpCurrencyLogged sync.Once

// warnPHPCurrencyOnce logs the start-up warnings, the first time a config starts.
func warnPHPCurrencyOnce(logger *zap.Logger) {
	phpCurrencyLogged.Do(func() { logPHPCurrency(logger, currentPHP()) })
}

// phpInfoLabels are the php_worker_php_info metric's labels: version, newest_listed,
// current (true, false, or unknown when the build did not check), eol and supported
// (true until the end of life has passed; unknown for a branch php-eol.txt does not know).
func phpInfoLabels(c phpCurrency) []string {
	current, supported := "unknown", "unknown"
	if c.Current != nil {
		current = fmt.Sprint(*c.Current)
	}
	if c.EOL != "" {
		supported = fmt.Sprint(!c.EOLPassed)
	}
	return []string{c.Version, c.NewestListed, current, c.EOL, supported}
}
