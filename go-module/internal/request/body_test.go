// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0

package request

import (
	"bytes"
	"errors"
	"io"
	"net/http"
	"os"
	"testing"
	"testing/iotest"
)

// readAll reads a buffered body back the way PHP does, in reads of odd sizes.
func readAll(t *testing.T, rb *requestBody) []byte {
	t.Helper()
	var out bytes.Buffer
	buf := make([]byte, 7777)
	for {
		n, err := rb.read(buf)
		if err != nil {
			t.Fatal(err)
		}
		out.Write(buf[:n])
		if n < len(buf) {
			return out.Bytes()
		}
	}
}

func TestBufferedBodiesStayInMemoryThenSpill(t *testing.T) {
	policy := BufferPolicy{Limit: 3 * chunkSize, Total: 64 << 20}
	for _, size := range []int{0, 1, chunkSize - 1, chunkSize, 3 * chunkSize, 3*chunkSize + 1, 5*chunkSize + 123} {
		base, files := bodyBuffered.Load(), bodySpillFiles.Load()
		want := filled(size, byte(size))
		// One byte per read: the body arrives as slowly as a client can send it.
		rb, err := bufferBody(iotest.OneByteReader(bytes.NewReader(want)), policy, 0)
		if err != nil {
			t.Fatalf("%d bytes: %v", size, err)
		}
		if rb.size != int64(size) {
			t.Fatalf("%d bytes: size %d", size, rb.size)
		}
		spilled := size > 3*chunkSize
		if (rb.spill != nil) != spilled || rb.memory > policy.Limit {
			t.Fatalf("%d bytes: spill file %v, memory %d", size, rb.spill != nil, rb.memory)
		}
		if got := readAll(t, rb); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back %d bytes, not the body", size, len(got))
		}
		if n, _ := rb.read(make([]byte, 10)); n != 0 {
			t.Fatalf("%d bytes: read past the end", size)
		}
		rb.close()
		rb.close()
		if bodyBuffered.Load() != base || bodySpillFiles.Load() != files {
			t.Fatalf("%d bytes: close left %d bytes, %d files counted", size, bodyBuffered.Load()-base, bodySpillFiles.Load()-files)
		}
	}
}

func TestTheTotalBoundSpillsBodiesSooner(t *testing.T) {
	base := bodyBuffered.Load()
	policy := BufferPolicy{Limit: 4 * chunkSize, Total: base + 2*chunkSize}
	first, err := bufferBody(bytes.NewReader(filled(3*chunkSize, 1)), policy, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer first.close()
	if first.memory != 2*chunkSize || first.spill == nil {
		t.Fatalf("memory %d, spill %v: want 2 chunks kept and the rest in a file", first.memory, first.spill != nil)
	}
	second, err := bufferBody(bytes.NewReader(filled(chunkSize, 2)), policy, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer second.close()
	if second.memory != 0 || second.spill == nil {
		t.Fatalf("memory %d: the total bound is reached, so the body goes to its file", second.memory)
	}
	if got := readAll(t, second); !bytes.Equal(got, filled(chunkSize, 2)) {
		t.Fatal("the spilled body did not read back whole")
	}
	if bodyBuffered.Load() != base+2*chunkSize {
		t.Fatalf("counted %d bytes, want 2 chunks", bodyBuffered.Load()-base)
	}
}

func TestABodyThatDoesNotEndProperlyIsAnErrorAndReleased(t *testing.T) {
	base, files := bodyBuffered.Load(), bodySpillFiles.Load()
	policy := BufferPolicy{Limit: chunkSize, Total: 64 << 20}
	for _, cut := range []int{10, 3 * chunkSize} { // in memory, and in the spill file
		body := io.MultiReader(bytes.NewReader(filled(cut, 3)), iotest.ErrReader(os.ErrDeadlineExceeded))
		if _, err := bufferBody(body, policy, 0); bodyErrorStatus(err) != http.StatusRequestTimeout {
			t.Fatalf("cut at %d: %v, want a read timeout (408)", cut, err)
		}
		tooLarge := io.MultiReader(bytes.NewReader(filled(cut, 3)), iotest.ErrReader(&http.MaxBytesError{Limit: 5}))
		if _, err := bufferBody(tooLarge, policy, 0); bodyErrorStatus(err) != http.StatusRequestEntityTooLarge {
			t.Fatalf("cut at %d: %v, want 413", cut, err)
		}
	}
	if bodyBuffered.Load() != base || bodySpillFiles.Load() != files {
		t.Fatal("a failed body left memory or a file counted")
	}
	if bodyErrorStatus(errors.Join(errSpill, os.ErrPermission)) != http.StatusInternalServerError {
		t.Fatal("a spill file that cannot be written is the server's error")
	}
}

func TestABodyPastTheLimitKeepsItsRestWithTheClient(t *testing.T) {
	policy := BufferPolicy{Limit: chunkSize, Total: 64 << 20}
	for _, size := range []int{3 * chunkSize, 3*chunkSize + 1, 3*chunkSize + 2, 10 * chunkSize} {
		want := filled(size, 7)
		client := bytes.NewReader(want)
		rb, err := bufferBody(client, policy, 3*chunkSize)
		if err != nil {
			t.Fatal(err)
		}
		if rb.complete() != (size <= 3*chunkSize) || rb.size > 3*chunkSize+1 {
			t.Fatalf("%d bytes: complete %v, read ahead %d", size, rb.complete(), rb.size)
		}
		if !rb.complete() && int64(client.Len()) != int64(size)-rb.size {
			t.Fatalf("%d bytes: read %d from the client, want no more than the read-ahead", size, int64(size)-int64(client.Len()))
		}
		if got := readAll(t, rb); !bytes.Equal(got, want) {
			t.Fatalf("%d bytes: read back %d bytes, not the body", size, len(got))
		}
		rb.close()
	}
}
