<?php
// Records its end, so a test can see that the code after the loop runs on shutdown.
$marker = getenv('LIFECYCLE_MARKER');
$served = 0;
while (frankenphp_handle_request(function () use (&$served) {
    $served++;
    if (isset($_GET['sleep'])) {
        sleep((int) $_GET['sleep']);
    }
    echo 'served:', $served;
})) {
}
file_put_contents($marker . '.' . getmypid() . '.' . spl_object_id(new stdClass()) . '.' . mt_rand(), "loop ended after $served\n");
