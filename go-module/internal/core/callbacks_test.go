// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package core

import (
	"strings"
	"testing"

	"go.uber.org/zap/zapcore"
)

func TestLogFieldsKeepOrderAndTypes(t *testing.T) {
	fields := LogFields([]byte(`{"worker":"app","line":3,"boot_ms":1.5,"ok":true,"none":null,"list":[1]}`))
	enc := zapcore.NewMapObjectEncoder()
	var keys []string
	for _, f := range fields {
		f.AddTo(enc)
		keys = append(keys, f.Key)
	}
	if strings.Join(keys, ",") != "worker,line,boot_ms,ok,list" {
		t.Errorf("keys %v", keys)
	}
	if enc.Fields["worker"] != "app" || enc.Fields["line"] != int64(3) || enc.Fields["boot_ms"] != 1.5 || enc.Fields["ok"] != true {
		t.Errorf("fields %v", enc.Fields)
	}
	if bad := LogFields([]byte(`not json`)); len(bad) != 1 || bad[0].Key != "fields" {
		t.Errorf("unreadable fields are kept raw: %v", bad)
	}
}
