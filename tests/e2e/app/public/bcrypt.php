<?php
// Hashes with bcrypt at ?cost=: seconds of CPU inside one C call, which PHP's time limit
// interrupts only when the call returns.
echo strlen(password_hash('x', PASSWORD_BCRYPT, ['cost' => (int) ($_GET['cost'] ?? 10)]));
