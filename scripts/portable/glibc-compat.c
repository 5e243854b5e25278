// Copyright 2026 The php_worker Authors
// SPDX-License-Identifier: Apache-2.0
//
// Linked into the portable binary only (scripts/build-portable.sh). Debian 12's static
// libstdc++ (std::random_device) calls arc4random, which glibc has only since 2.36; this
// definition binds that call here, so the binary also runs on glibc 2.35 (Ubuntu 22.04).
// Like glibc's, it takes the kernel's random bytes and aborts when there are none.

#include <errno.h>
#include <stdint.h>
#include <stdlib.h>
#include <sys/random.h>

uint32_t arc4random(void)
{
	uint32_t value;
	size_t got = 0;
	while (got < sizeof value) {
		ssize_t n = getrandom((char *)&value + got, sizeof value - got, 0);
		if (n < 0) {
			if (errno == EINTR)
				continue;
			abort();
		}
		got += (size_t)n;
	}
	return value;
}
