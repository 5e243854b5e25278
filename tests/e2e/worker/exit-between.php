<?php
// Leaves the loop after two requests with exit(0): a clean restart.
$count = 0;
while (frankenphp_handle_request(function () use (&$count) {
    $count++;
    echo 'count:', $count;
})) {
    if ($count >= 2) {
        exit(0);
    }
}
