// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"encoding/json"
	"fmt"
	"maps"
	"slices"
	"strings"
)

// PHPIni holds php.ini settings given in the config (php_ini) or on php-cli's command line
// (-d). A setting keeps the last value given, as in php.ini, except extension and
// zend_extension: PHP loads one extension per line, so those keep every value given, in
// order. In JSON a setting's value is a string; extension and zend_extension also take a
// list of strings.
type PHPIni map[string][]string

// repeatableINI tells whether PHP loads every line of key rather than keeping the last.
func repeatableINI(key string) bool {
	return strings.EqualFold(key, "extension") || strings.EqualFold(key, "zend_extension")
}

// Set gives key a value: appended for extension and zend_extension, else replacing the
// value key had.
func (p PHPIni) Set(key, value string) {
	if repeatableINI(key) {
		p[key] = append(p[key], value)
		return
	}
	p[key] = []string{value}
}

// Get is key's value (the last one given), or "".
func (p PHPIni) Get(key string) string {
	if v := p[key]; len(v) > 0 {
		return v[len(v)-1]
	}
	return ""
}

// Merge sets every setting of o in p, in o's order for repeated keys.
func (p PHPIni) Merge(o PHPIni) {
	for _, k := range slices.Sorted(maps.Keys(o)) {
		for _, v := range o[k] {
			p.Set(k, v)
		}
	}
}

// Clone is a copy of p that shares nothing with it.
func (p PHPIni) Clone() PHPIni {
	out := make(PHPIni, len(p))
	for k, v := range p {
		out[k] = slices.Clone(v)
	}
	return out
}

// Equal tells whether p and o set the same values, in the same order.
func (p PHPIni) Equal(o PHPIni) bool {
	return maps.EqualFunc(p, o, slices.Equal)
}

// ChangedKeys lists, sorted, the keys whose values differ between p and o.
func (p PHPIni) ChangedKeys(o PHPIni) []string {
	var keys []string
	for k, v := range p {
		if w, ok := o[k]; !ok || !slices.Equal(v, w) {
			keys = append(keys, k)
		}
	}
	for k := range o {
		if _, ok := p[k]; !ok {
			keys = append(keys, k)
		}
	}
	slices.Sort(keys)
	return keys
}

// MarshalJSON writes a single value as a string and several as a list.
func (p PHPIni) MarshalJSON() ([]byte, error) {
	out := make(map[string]any, len(p))
	for k, v := range p {
		if len(v) == 1 {
			out[k] = v[0]
		} else {
			out[k] = v
		}
	}
	return json.Marshal(out)
}

// UnmarshalJSON reads strings, and lists of strings for extension and zend_extension.
func (p *PHPIni) UnmarshalJSON(b []byte) error {
	var raw map[string]json.RawMessage
	if err := json.Unmarshal(b, &raw); err != nil {
		return err
	}
	out := make(PHPIni, len(raw))
	for k, r := range raw {
		var one string
		if err := json.Unmarshal(r, &one); err == nil {
			out[k] = []string{one}
			continue
		}
		var several []string
		if err := json.Unmarshal(r, &several); err != nil {
			return fmt.Errorf("php_ini %s: a value is a string (or, for extension and zend_extension, a list of strings)", k)
		}
		if !repeatableINI(k) && len(several) != 1 {
			return fmt.Errorf("php_ini %s: only extension and zend_extension take several values (PHP keeps the last of any other)", k)
		}
		out[k] = several
	}
	*p = out
	return nil
}
