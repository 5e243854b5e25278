<?php
// The value mt_rand() gives after mt_srand(42) and one draw: what a worker request would
// read if the previous request's seed crossed over (tests/e2e/test_security.py).
mt_srand(42);
mt_rand();
echo mt_rand();
