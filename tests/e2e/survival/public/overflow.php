<?php
// Overflows the C stack: serialize() recurses in C once per level of nesting, and
// PHP 8.2 has no guard against it, so the thread gets SIGSEGV; PHP 8.3+ throws an Error
// first, unless zend.max_allowed_stack_size is -1.
ini_set('memory_limit', '-1');
$a = [];
for ($i = 0; $i < 3000000; $i++) {
    $a = [$a];
}
echo strlen(serialize($a));
