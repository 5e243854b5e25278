// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package phpworker

import (
	"errors"
	"fmt"
	"io"
	"net/http"
	"os"
	"strings"
	"testing"
	"testing/iotest"

	"github.com/caddyserver/caddy/v2/modules/caddyhttp"
)

// cutBody yields data, then fails with err, as Go's body reader does when the client
// leaves (io.ErrUnexpectedEOF) or a deadline passes.
type cutBody struct {
	data string
	err  error
}

func (c *cutBody) Read(p []byte) (int, error) {
	if c.data == "" {
		return 0, c.err
	}
	n := copy(p, c.data)
	c.data = c.data[n:]
	return n, nil
}

func TestReadBodyTellsTheEndFromAClientThatLeft(t *testing.T) {
	buf := make([]byte, 8)
	n, err := readBody(iotest.OneByteReader(strings.NewReader("abc")), buf)
	if n != 3 || err != nil {
		t.Errorf("a complete body: got %d, %v; want 3, nil", n, err)
	}
	n, err = readBody(strings.NewReader("abcdefghij"), buf)
	if n != 8 || err != nil {
		t.Errorf("a body longer than the buffer: got %d, %v; want 8, nil", n, err)
	}
	n, err = readBody(&cutBody{"abc", io.ErrUnexpectedEOF}, buf)
	if n != 3 || !errors.Is(err, io.ErrUnexpectedEOF) {
		t.Errorf("a body cut short: got %d, %v; want 3, io.ErrUnexpectedEOF", n, err)
	}
}

func TestBodyErrorStatus(t *testing.T) {
	for _, tc := range []struct {
		err  error
		want int
	}{
		{fmt.Errorf("read tcp: %w", os.ErrDeadlineExceeded), http.StatusRequestTimeout},
		{caddyhttp.Error(http.StatusRequestEntityTooLarge, &http.MaxBytesError{Limit: 10}), http.StatusRequestEntityTooLarge},
		{&http.MaxBytesError{Limit: 10}, http.StatusRequestEntityTooLarge},
		{io.ErrUnexpectedEOF, http.StatusBadRequest},
	} {
		if got := bodyErrorStatus(tc.err); got != tc.want {
			t.Errorf("bodyErrorStatus(%v) = %d, want %d", tc.err, got, tc.want)
		}
	}
}
