<?php
// Counts the requests this script run served; boots once per thread.
$count = 0;
$booted = getmypid() . '-' . spl_object_id(new stdClass());
echo "counter worker booting\n"; // goes to the log
while (frankenphp_handle_request(function () use (&$count) {
    $count++;
    header('Content-Type: text/plain');
    echo 'requests:', $count;
})) {
}
